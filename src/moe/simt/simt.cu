// The "simt" grouped backend: launcher of moe/simt/kernel.cuh. Runs every valid problem with at
// most kGroupedMaxExperts experts.

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <string>

#include "fp8route/tuning/cuda_check.h"
#include "fp8route/device.h"
#include "fp8route/error.h"
#include "moe/backend.h"
#include "moe/simt/kernel.cuh"

namespace fp8route::moe {
namespace {

// Resident blocks per SM the grid asks for, as the kernel's __launch_bounds__ promises: 256 threads
// at 128 registers each, two per SM (unbounded it takes ~190 registers and one block fits); a second
// block hides the latency of the other's byte loads.
constexpr int kBlocksPerSm = 2;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

template <class OutT>
void launch(const GroupedProblem& p, const kernels::GroupedSimtParams& k, cudaStream_t stream) {
  // The most tiles any routing can make: every expert adds at most one partial m-tile to the
  // contiguous rows; masked experts hold at most M_max rows each. The grid never exceeds it, so a
  // small problem does not start blocks that can only find no work.
  const int64_t n_tiles = ceil_div(p.n, kernels::kGroupedTile);
  const int64_t m_tiles = p.form == GroupedForm::masked ? p.experts * ceil_div(p.rows, kernels::kGroupedTile)
                                                        : ceil_div(p.rows, kernels::kGroupedTile) + p.experts;
  const int64_t bound = m_tiles * n_tiles;
  const int64_t resident = int64_t(device_info(-1).sm_count) * kBlocksPerSm;
  const unsigned grid = static_cast<unsigned>(std::max<int64_t>(1, std::min(bound, resident)));
  const size_t smem = (static_cast<size_t>(p.experts) + 1) * sizeof(int);
  kernels::grouped_simt_kernel<OutT><<<grid, kernels::kGroupedThreads, smem, stream>>>(k);
  FP8ROUTE_CHECK_LAUNCH();
}

class SimtBackend final : public GroupedBackend {
 public:
  std::string_view name() const override { return "simt"; }
  std::string supports(const GroupedProblem& p) const override {
    if (cuda_device_count() == 0) return "no GPU: " + cuda_unavailable_reason();
    const DeviceInfo& d = device_info(-1);
    if (!d.is_sm90())
      return "simt: built for sm_90a; device " + std::to_string(d.index) + " is sm_" + std::to_string(d.sm_version());
    if (p.experts > kernels::kGroupedMaxExperts)
      return "simt: at most " + std::to_string(kernels::kGroupedMaxExperts) +
             " experts (its tile scan holds one int per expert in shared memory), got " + std::to_string(p.experts);
    return "";
  }
  void run(const GroupedProblem& p, const GroupedOperands& ops, cudaStream_t stream) const override {
    kernels::GroupedSimtParams k{};
    k.a = ops.a;
    k.b = ops.b;
    k.sa = static_cast<const float*>(ops.sa);
    k.sb = ops.sb;
    k.g = {ops.groups, static_cast<int>(p.experts), static_cast<int>(p.rows), p.form == GroupedForm::masked,
           p.offsets_with_start};
    k.bsa = {ops.sa, ops.sa_stride_e, ops.sa_stride_t, ops.sa_stride_c, p.sa_storage == ScaleStorage::ue8m0_packed};
    k.out = ops.out;
    k.n = static_cast<int>(p.n);
    k.k = static_cast<int>(p.k);
    k.scale_kind = static_cast<int>(p.scale);
    k.sa_per_expert = p.sa_per_expert;
    if (p.out == DType::bf16)
      launch<__nv_bfloat16>(p, k, stream);
    else
      launch<__half>(p, k, stream);
  }
};

}  // namespace

const GroupedBackend& simt_backend() {
  static const SimtBackend b;
  return b;
}

}  // namespace fp8route::moe
