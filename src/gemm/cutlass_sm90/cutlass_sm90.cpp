// The cutlass_sm90 backend: CUTLASS 3.x SM90 TMA warp-specialized kernels, one per line of
// configs.def and output dtype (kernel.cuh). This file holds what needs no CUTLASS: the config
// names, the requirements (supports), the stream-K workspace (per stream, or per captured graph) and
// 16-byte aligned copies of scales and bias that are only element-aligned.

#include <algorithm>
#include <array>
#include <cstdint>
#include <iterator>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "fp8route/tuning/cuda_check.h"
#include "fp8route/device.h"
#include "fp8route/error.h"
#include "gemm/backend.h"
#include "gemm/cutlass_sm90/config.h"
#include "core/workspace.h"

namespace fp8route::gemm {
namespace cutlass_sm90 {

std::string config_name(const ConfigSpec& c) {
  std::string s = c.family == Family::row ? "row_" : "block_";
  s += std::to_string(c.tile_m) + "x" + std::to_string(c.tile_n) + "x" + std::to_string(c.tile_k) + "_" +
       std::to_string(c.cluster_m) + "x" + std::to_string(c.cluster_n) + "x1_";
  s += c.schedule == Schedule::pingpong ? "pingpong" : "coop";
  if (c.accum == Accum::fastacc) s += "_fastacc";
  if (c.tiles == Tiles::streamk) s += "_streamk";
  if (c.operands == Operands::swapab) s += "_swapab";
  return s;
}

namespace {

constexpr ConfigSpec kConfigs[] = {
#define FP8ROUTE_CUTLASS_CONFIG(...) FP8ROUTE_CUTLASS_SPEC(__VA_ARGS__),
#include "gemm/cutlass_sm90/configs.def"
#undef FP8ROUTE_CUTLASS_CONFIG
};
constexpr int kNumConfigs = static_cast<int>(std::size(kConfigs));

#ifdef FP8ROUTE_HAVE_CUTLASS
template <int... I>
std::array<std::array<KernelFns, 2>, kNumConfigs> make_table(std::integer_sequence<int, I...>) {
  return {{{kernel_fns<kConfigs[I], DType::bf16>(), kernel_fns<kConfigs[I], DType::f16>()}...}};
}

const KernelFns& kernel(int config, DType out) {
  static const auto table = make_table(std::make_integer_sequence<int, kNumConfigs>{});
  return table[config][out == DType::bf16 ? 0 : 1];
}

KernelArgs kernel_args(const GemmProblem& p, const GemmOperands& ops, const DeviceInfo* dev) {
  KernelArgs x;
  x.m = static_cast<int>(p.m), x.n = static_cast<int>(p.n), x.k = static_cast<int>(p.k);
  x.a = ops.a, x.lda = ops.lda, x.b = ops.b, x.ldb = ops.ldb;
  x.sa = ops.sa, x.sb = ops.sb, x.sa_vector = p.sa_vector, x.sb_vector = p.sb_vector;
  x.bias = ops.bias, x.out = ops.out, x.ldo = ops.ldo;
  if (dev) x.device = dev->index, x.sm_count = dev->sm_count;
  return x;
}
#endif

class CutlassSm90Backend final : public GemmBackend {
 public:
  std::string_view name() const override { return "cutlass_sm90"; }

  const std::vector<std::string>& configs() const override {
    static const std::vector<std::string> names = config_names(kConfigs);
    return names;
  }

  int m_tile(int config) const override {
    const ConfigSpec& c = kConfigs[config];
    return c.operands == Operands::swapab ? c.tile_n : c.tile_m;
  }

  // precise: the mainloop promotes the tensor core's partial sums into fp32 registers every 128 of
  // K; fastacc: the tensor core accumulates over all of K.
  fp8route::Accum accum(const GemmProblem& /*p*/, int config) const override {
    return kConfigs[config].accum == Accum::fastacc ? fp8route::Accum::fast : fp8route::Accum::precise;
  }

  std::string supports(const GemmProblem& p, int config) const override {
    const ConfigSpec& c = kConfigs[config];
    if (c.family == Family::row && p.scale == ScaleKind::block)
      return "a row_ config applies tensor and row scales; block scales need a block_ config";
    if (c.family == Family::block && p.scale != ScaleKind::block)
      return "a block_ config applies block scales only; tensor and row scales need a row_ config";
    if (std::string why = common_fast_path_reason(p); !why.empty()) return why;
    if (std::string why = unpadded_scale_b_reason(p); !why.empty()) return "CUTLASS blockwise " + why;
    if (p.k % 16 != 0)
      return "needs K % 16 == 0 (TMA loads 16-byte units of a's and b's rows), got K=" + std::to_string(p.k);
    if (p.n % 8 != 0)
      return "needs N % 8 == 0 (TMA stores 16-byte units of y's rows), got N=" + std::to_string(p.n);
    constexpr int64_t kMax = std::numeric_limits<int32_t>::max() - 3;  // align(M, 4) too
    if (p.m > kMax || p.n > kMax || p.k > kMax) return "M, N and K must each be < 2^31 - 3 (int32 extents)";
    if (p.out != DType::bf16 && p.out != DType::f16) return "out must be bf16 or f16";
#ifdef FP8ROUTE_HAVE_CUTLASS
    // Packed strides: the real ones are at least as long and 16-byte aligned (p.align == 16).
    GemmOperands packed;
    packed.lda = packed.ldb = p.k;
    packed.ldo = p.n;
    if (!kernel(config, p.out).can_implement(kernel_args(p, packed, nullptr)))
      return "CUTLASS can_implement rejects this shape";
    return sm90_device_reason();
#else
    return "this build has no CUTLASS headers (scripts/setup.sh installs them)";
#endif
  }

  void run(const GemmProblem& p, const GemmOperands& ops, int config, cudaStream_t stream) const override {
#ifdef FP8ROUTE_HAVE_CUTLASS
    const DeviceInfo& dev = device_info();
    // The blockwise mainloop loads block scales with TMA (16-byte aligned addresses), and the
    // epilogue's broadcasts are declared with 16-byte alignment.
    const std::string who = "cutlass_sm90/" + configs()[config];
    const KernelArgs x = kernel_args(p, with_aligned_scales(p, ops, stream, who), &dev);
    const KernelFns& k = kernel(config, p.out);
    FP8ROUTE_CHECK_CAT(k.can_implement(x), ErrorCategory::unsupported,
                       "cutlass_sm90/" << configs()[config] << ": CUTLASS can_implement rejects "
                                       << to_string(p) << " with lda=" << ops.lda << " ldb=" << ops.ldb
                                       << " ldo=" << ops.ldo);
    const size_t bytes = k.workspace_bytes(x);
    void* workspace =
        bytes == 0 ? nullptr : workspaces_.get(dev.index, bytes, stream, who);
    k.launch(x, workspace, stream);
#else
    (void)p, (void)ops, (void)config, (void)stream;
    FP8ROUTE_FAIL(ErrorCategory::unsupported, "cutlass_sm90: this build has no CUTLASS headers");
#endif
  }

 private:
  // The stream-K workspace (partial tiles and their flags; CUTLASS zeroes the flags at each launch),
  // one per (device, stream), or per graph under capture (core/workspace.h).
  mutable Workspaces workspaces_{"stream-K workspace", /*zero_new=*/true};  // zeroed when made, as cuBLASLt's
};

}  // namespace
}  // namespace cutlass_sm90

const GemmBackend& cutlass_sm90_backend() {
  static const cutlass_sm90::CutlassSm90Backend b;
  return b;
}

}  // namespace fp8route::gemm
