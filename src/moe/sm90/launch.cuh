#pragma once
// Host side shared by the SM90 grouped launchers (moe/decode, moe/wgmma): the requirements of their
// TMA operands and device, and the kernel arguments they all take (GroupedArgs).

#include <cstdint>
#include <string>
#include <string_view>

#include "fp8route/device.h"
#include "moe/backend.h"
#include "moe/sm90/common.cuh"

namespace fp8route::moe {

// Rows of a and out in their 2-D view: E x M_max (masked) or M_total.
inline int64_t a_rows(const GroupedProblem& p) {
  return p.form == GroupedForm::masked ? p.experts * p.rows : p.rows;
}

// Why backend `name` cannot take p's operands, or "": at most max_experts (its scan in shared
// memory), 16-byte aligned a and b (TMA), bf16 or f16 out, and rows of a and out that are int32.
inline std::string sm90_operands_reason(const GroupedProblem& p, std::string_view name, int max_experts) {
  const std::string who(name);
  if (p.experts > max_experts)
    return who + ": at most " + std::to_string(max_experts) + " experts (the scan in shared memory), got " +
           std::to_string(p.experts);
  if (p.align < 16)
    return who + ": a and b must be 16-byte aligned, addresses and row stride K (TMA), got align=" +
           std::to_string(p.align);
  if (p.out != DType::bf16 && p.out != DType::f16) return who + ": out must be bf16 or f16";
  if (a_rows(p) > (int64_t{1} << 31) - 256) return who + ": the rows of a (E x M_max) must be below 2^31 - 256";
  return "";
}

// Why backend `name` cannot run on the current device, or "".
inline std::string sm90_device_reason(std::string_view name) {
  if (cuda_device_count() == 0) return "no GPU: " + cuda_unavailable_reason();
  const DeviceInfo& d = device_info(-1);
  if (!d.is_sm90())
    return std::string(name) + ": built for sm_90a; device " + std::to_string(d.index) + " is sm_" +
           std::to_string(d.sm_version());
  return "";
}

inline void set_grouped_args(kernels::moe::GroupedArgs& k, const GroupedProblem& p, const GroupedOperands& ops) {
  k.g = {ops.groups, static_cast<int>(p.experts), static_cast<int>(p.rows), p.form == GroupedForm::masked,
         p.offsets_with_start};
  k.bsa = {ops.sa, ops.sa_stride_e, ops.sa_stride_t, ops.sa_stride_c, p.sa_storage == ScaleStorage::ue8m0_packed};
  k.sa = static_cast<const float*>(ops.sa);
  k.sb = ops.sb;
  k.out = ops.out;
  k.n = static_cast<int>(p.n);
  k.kblocks = static_cast<int>((p.k + 127) / 128);
  k.scale_kind = static_cast<int>(p.scale);
  k.sa_per_expert = p.sa_per_expert;
}

}  // namespace fp8route::moe
