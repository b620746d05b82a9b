// The wgmma backend (kernel sm90_fp8_gemm_block): launcher of kernel.cuh (block-scaled FP8 GEMM for prefill). Holds the config
// list, the requirements (supports) and the persistent grid size.

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <iterator>
#include <limits>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "fp8route/tuning/cuda_check.h"
#include "core/launch.h"
#include "fp8route/device.h"
#include "fp8route/error.h"
#include "gemm/backend.h"
#include "gemm/tensor_map.h"
#include "gemm/block/kernel.cuh"

namespace fp8route::gemm {
namespace {

namespace wk = kernels::block;

struct WgmmaConfig {
  int bn;          // tile columns (the tile is 128 x bn)
  int stages;      // K blocks in flight per block
  int cluster;     // blocks per cluster sharing b tiles by multicast (1 or 2)
  bool tma_store;  // the output leaves through shared memory and the tensor memory accelerator
  wk::Loop loop;   // the consumers' K loop (kernel.cuh)
};

// The configs, listed once. Tile widths that are not powers of two give column tile counts that
// fill the 132 SMs better on some N (N = 7168: 56 tiles of 128, 50 of 144 ...); wider tiles read
// less per FLOP. Stages: as many as fit 227 KB. The output leaves through the tensor memory
// accelerator where the width is whole 32-column boxes (faster than stores from registers,
// docs/design.md, "Measurements behind the rules"); 144 stores from registers. The _acc2 configs run the two-accumulator K loop (kernel.cuh),
// which helps most without the cluster: on many problems the tune picks n128_s6_c1_tma_acc2.
constexpr WgmmaConfig kConfigs[] = {
    {128, 6, 2, true, wk::Loop::serial},    // n128_s6_c2_tma
    {128, 6, 1, true, wk::Loop::serial},    // n128_s6_c1_tma
    {144, 6, 2, false, wk::Loop::serial},   // n144_s6_c2
    {192, 5, 2, true, wk::Loop::serial},    // n192_s5_c2_tma
    {128, 6, 2, true, wk::Loop::overlap},   // n128_s6_c2_tma_acc2
    {128, 6, 1, true, wk::Loop::overlap},   // n128_s6_c1_tma_acc2
};
constexpr int kNumConfigs = static_cast<int>(std::size(kConfigs));

std::string config_name(const WgmmaConfig& c) {
  return "n" + std::to_string(c.bn) + "_s" + std::to_string(c.stages) + "_c" + std::to_string(c.cluster) +
         (c.tma_store ? "_tma" : "") + (c.loop == wk::Loop::overlap ? "_acc2" : "");
}

using Kernel = void (*)(const CUtensorMap, const CUtensorMap, const CUtensorMap, const CUtensorMap, const wk::Params);

template <class OutT, int I>
constexpr Kernel kernel_of() {
  constexpr WgmmaConfig c = kConfigs[I];
  return &wk::sm90_fp8_gemm_block<OutT, c.bn, c.stages, c.cluster, c.tma_store, c.loop>;
}

template <int I>
constexpr int smem_of() {
  constexpr WgmmaConfig c = kConfigs[I];
  return wk::Traits<c.bn, c.stages, c.cluster, c.tma_store>::kSmemBytes;
}

struct KernelInfo {
  Kernel kernel[2];  // bf16, f16
  int smem;
};

template <int... I>
std::array<KernelInfo, kNumConfigs> make_table(std::integer_sequence<int, I...>) {
  return {{KernelInfo{{kernel_of<__nv_bfloat16, I>(), kernel_of<__half, I>()}, smem_of<I>()}...}};
}
const std::array<KernelInfo, kNumConfigs>& kernels_table() {
  static const auto t = make_table(std::make_integer_sequence<int, kNumConfigs>{});
  return t;
}

// Blocks of a config resident on the whole GPU at once (whole clusters), per device; queried once.
int resident_blocks(int config, int out_index, const DeviceInfo& dev) {
  static std::mutex mu;
  static std::map<std::tuple<int, int, int>, int> cache;
  const auto key = std::tuple{config, out_index, dev.index};
  {
    std::lock_guard<std::mutex> lock(mu);
    if (auto it = cache.find(key); it != cache.end()) return it->second;
  }
  const KernelInfo& k = kernels_table()[config];
  const void* fn = reinterpret_cast<const void*>(k.kernel[out_index]);
  allow_dynamic_smem(fn, k.smem, dev.index);
  const int blocks = resident_cluster_blocks(fn, wk::kThreads, k.smem, kConfigs[config].cluster);
  std::lock_guard<std::mutex> lock(mu);
  return cache.emplace(key, blocks).first->second;
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

class WgmmaBackend final : public GemmBackend {
 public:
  std::string_view name() const override { return "wgmma"; }

  const std::vector<std::string>& configs() const override {
    static const std::vector<std::string> names = config_names(kConfigs);
    return names;
  }

  int m_tile(int /*config*/) const override { return wk::kBM; }

  // How this backend compares with the others depends on how its 128-row tiles fill the SMs, which
  // a neighbouring shape's measurement does not tell: a load-time probe also times the config the
  // block-scale tune picks most (n128_s6_c1_tma_acc2).
  std::vector<int> probe_configs(const GemmProblem& p) const override {
    if (p.scale != ScaleKind::block) return {};
    const std::vector<std::string>& names = configs();
    const auto it = std::find(names.begin(), names.end(), "n128_s6_c1_tma_acc2");
    return it == names.end() ? std::vector<int>{} : std::vector<int>{static_cast<int>(it - names.begin())};
  }

  std::string supports(const GemmProblem& p, int /*config*/) const override {
    if (p.scale != ScaleKind::block) return "runs block scales only (1x128 scale_a, 128x128 scale_b)";
    if (std::string why = common_fast_path_reason(p); !why.empty()) return why;
    if (p.out != DType::bf16 && p.out != DType::f16) return "out must be bf16 or f16";
    if (p.k < 1) return "K must be >= 1";
    constexpr int64_t kMax = std::numeric_limits<int32_t>::max() - 512;
    if (p.m > kMax || p.n > kMax || p.k > kMax)
      return "M, N and K must be < 2^31 - 512 (int32 indices), got M=" + std::to_string(p.m) +
             " N=" + std::to_string(p.n) + " K=" + std::to_string(p.k);
    return sm90_device_reason();
  }

  void run(const GemmProblem& p, const GemmOperands& ops_in, int config, cudaStream_t stream) const override {
    const DeviceInfo& dev = device_info();
    const WgmmaConfig& c = kConfigs[config];
    const int out_index = p.out == DType::bf16 ? 0 : 1;
    const KernelInfo& k = kernels_table()[config];
    // sa is read with the tensor memory accelerator: 16-byte aligned.
    const GemmOperands ops = with_aligned_scales(p, ops_in, stream, "wgmma");
    wk::Params kp{};
    kp.sb = ops.sb, kp.bias = ops.bias, kp.out = ops.out, kp.ldo = ops.ldo;
    kp.m = static_cast<int>(p.m), kp.n = static_cast<int>(p.n);
    kp.kblocks = static_cast<int>(ceil_div(p.k, wk::kBK));
    kp.sb_ld = p.sb_padded ? (kp.kblocks + 3) / 4 * 4 : kp.kblocks;
    kp.tiles_m = static_cast<int>(ceil_div(ceil_div(p.m, wk::kBM), c.cluster) * c.cluster);
    kp.tiles_n = static_cast<int>(ceil_div(p.n, c.bn));
    const int64_t sa_ld = (p.m + 3) / 4 * 4;
    const CUtensorMap amap = byte_matrix_map(ops.a, p.m, p.k, ops.lda, wk::kBM, "wgmma");
    const CUtensorMap bmap = byte_matrix_map(ops.b, p.n, p.k, ops.ldb, c.bn / c.cluster, "wgmma");
    const CUtensorMap samap = float_matrix_map(ops.sa, kp.kblocks, sa_ld, sa_ld, wk::kBM, "wgmma");
    // Without the tensor-memory-accelerator store the kernel does not read dmap: any valid map.
    const CUtensorMap dmap = c.tma_store ? half_matrix_map(ops.out, p.m, p.n, ops.ldo, 64, "wgmma") : amap;
    const int64_t work = int64_t(kp.tiles_m / c.cluster) * kp.tiles_n;
    const int64_t slots = resident_blocks(config, out_index, dev) / c.cluster;
    FP8ROUTE_CHECK_CAT(slots > 0, ErrorCategory::cuda_error,
                       "wgmma: config " << configs()[config] << " fits no cluster on this GPU");
    LaunchShape s;
    s.grid = dim3(static_cast<unsigned>(std::min(work, slots) * c.cluster));
    s.block = dim3(wk::kThreads);
    s.smem = k.smem;
    if (c.cluster > 1) s.cluster = dim3(c.cluster, 1, 1);
    s.pdl = true;
    launch_kernel(k.kernel[out_index], s, stream, amap, bmap, samap, dmap, kp);
  }
};

}  // namespace

const GemmBackend& wgmma_backend() {
  static const WgmmaBackend b;
  return b;
}

}  // namespace fp8route::gemm
