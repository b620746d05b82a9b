// The decode backend: launcher of kernel.cuh (small M, where a GEMM is a read of its weight).
// Holds the config list, the requirements (supports) and the split-K rule.

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <iterator>
#include <limits>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "fp8route/tuning/chain_trace.h"
#include "fp8route/tuning/cuda_check.h"
#include "core/launch.h"
#include "fp8route/device.h"
#include "fp8route/error.h"
#include "gemm/backend.h"
#include "fp8route/tuning/gemm_knobs.h"
#include "gemm/decode/kernel.cuh"
#include "gemm/decode/plan.cuh"
#include "gemm/tensor_map.h"

namespace fp8route::gemm {
namespace {

namespace dk = kernels::decode;
using decode_plan::ceil_div;
using decode_plan::Slots;

using DecodeConfig = decode_plan::Config;

// The configs, listed once. 64- and 128-row blocks, and stages enough for >= 64 KB of weight in
// flight per SM (HBM latency x bandwidth / SMs is ~40 KB on an H200); the 64-row configs with up
// to 8 stages fit two blocks per SM.
constexpr DecodeConfig kConfigs[] = {
    {1, 1, 8},  // m8_n64_s8
    {1, 2, 8},  // m8_n128_s8
    {2, 1, 8},  // m16_n64_s8
    {2, 2, 8},  // m16_n128_s8
    {4, 1, 6},  // m32_n64_s6
    {4, 2, 6},  // m32_n128_s6
    {8, 1, 6},  // m64_n64_s6
    {8, 2, 4},  // m64_n128_s4
};
constexpr int kNumConfigs = static_cast<int>(std::size(kConfigs));

using Kernel = void (*)(const CUtensorMap, const CUtensorMap, const dk::Params);

template <class OutT, int I>
constexpr Kernel kernel_of() {
  constexpr DecodeConfig c = kConfigs[I];
  return &dk::sm90_fp8_gemm_decode<OutT, c.token_tiles, c.row_tiles, c.stages>;
}

template <int I>
using TraitsOf = dk::Traits<kConfigs[I].token_tiles, kConfigs[I].row_tiles, kConfigs[I].stages>;

// A deepened ring's shared memory at most: 32 KB of an SM's 228 KB stay free for the blocks of the
// kernel before (decode attention or an RMSNorm: 6 KB and under), which a projection's blocks
// start beside under programmatic dependent launch.
constexpr int kDeepRingSmem = 196 * 1024;

struct KernelInfo {
  Kernel kernel[2];  // bf16, f16
  int smem;          // with the config's own ring
  int rows, max_m;
  int stages;
  int smem_per_stage;  // a ring of r stages and scale slices of b bytes: r * smem_per_stage + b + 1024
  // The dynamic shared memory the kernel is allowed (once per kernel: the deepest ring it may get).
  int smem_allowed() const { return std::max(smem, kDeepRingSmem); }
};

template <int... I>
std::array<KernelInfo, kNumConfigs> make_table(std::integer_sequence<int, I...>) {
  return {{KernelInfo{{kernel_of<__nv_bfloat16, I>(), kernel_of<__half, I>()}, TraitsOf<I>::kSmemBytes,
                      decode_plan::rows(kConfigs[I]), decode_plan::max_m(kConfigs[I]),
                      kConfigs[I].stages, TraitsOf<I>::smem_bytes(1, 0) - TraitsOf<I>::smem_bytes(0, 0)}...}};
}
const std::array<KernelInfo, kNumConfigs>& kernels_table() {
  static const auto t = make_table(std::make_integer_sequence<int, kNumConfigs>{});
  return t;
}

// Queried once per config and device.
const Slots& resident_blocks(int config, const DeviceInfo& dev) {
  static decode_plan::SlotsCache cache;
  return cache.get(config, dev.index, [&] {
    const KernelInfo& k = kernels_table()[config];
    allow_dynamic_smem(reinterpret_cast<const void*>(k.kernel[0]), k.smem_allowed(), dev.index);
    return decode_plan::query_slots(reinterpret_cast<const void*>(k.kernel[0]), k.smem, dev.sm_count);
  });
}

struct Launch {
  int row_blocks = 0, splits = 1, split_kblocks = 0;
};

// decode_plan::best_split on the row blocks. Block scales: a split's sa slice [kb][align(M, 4)]
// and sb slice must fit their shared memory. Returns splits = 0 when no split count satisfies that.
Launch plan_splits(const GemmProblem& p, int rows, const Slots& slots) {
  const int64_t kblocks = ceil_div(p.k, dk::kKBlock);
  const int64_t row_blocks = ceil_div(p.n, rows);
  auto fits = [&](int64_t skb) {
    if (p.scale != ScaleKind::block) return true;
    const int64_t sa_ld = (p.m + 3) / 4 * 4, nbs = (rows + 127) / 128;
    return skb * sa_ld * 4 <= dk::kSaBytes && nbs * skb * 4 <= dk::kSbBytes;
  };
  auto waves = [&](int64_t splits) { return ceil_div(row_blocks * splits, slots[splits]); };
  const decode_plan::Split s = decode_plan::best_split(kblocks, slots, fits, waves);
  return Launch{static_cast<int>(row_blocks), s.splits, s.split_kblocks};
}

std::atomic<bool>& deep_ring_flag() {
  static std::atomic<bool> flag{false};
  return flag;
}

// The ring: with static weights the producer issues min(K blocks, ring) weight tiles before
// griddepcontrol.wait, the rest as stages free after it. The ring may grow past the config's stages
// (decode_deep_ring()) up to the block's whole K slice within kDeepRingSmem, where that costs no
// residency: the config runs one block per SM anyway, and the grid is one wave (blocks of a later
// wave start after the wait has released, so a deeper ring before it buys them nothing). A deep
// ring leaves out the block-scale slices when the scales are not blocks. The sum over K blocks is
// the same in any ring: the result does not change.
struct Ring {
  int stages, scale_bytes;
  int smem(const KernelInfo& k) const { return stages * k.smem_per_stage + scale_bytes + 1024; }
};
Ring ring_of(const KernelInfo& k, const GemmProblem& p, bool static_weight, const Launch& l, const Slots& slots,
             const DeviceInfo& dev) {
  const Ring own{k.stages, dk::kSaBytes + dk::kSbBytes};
  if (!static_weight || !decode_deep_ring() || l.split_kblocks <= k.stages) return own;
  if (slots[1] > dev.sm_count || int64_t(l.row_blocks) * l.splits > slots[l.splits]) return own;  // 2+ per SM or waves
  const int scale_bytes = p.scale == ScaleKind::block ? own.scale_bytes : 0;
  const int fit = (kDeepRingSmem - scale_bytes - 1024) / k.smem_per_stage;
  return Ring{std::max(k.stages, std::min(l.split_kblocks, fit)), scale_bytes};
}

class DecodeBackend final : public GemmBackend {
 public:
  std::string_view name() const override { return "decode"; }

  const std::vector<std::string>& configs() const override {
    static const std::vector<std::string> names = config_names(kConfigs);
    return names;
  }

  // The configs of the smallest token tile that covers M (both row counts): a larger tile does the
  // same streaming with more idle MMA columns.
  std::vector<int> probe_configs(const GemmProblem& p) const override {
    int tile = 0;
    for (const DecodeConfig& c : kConfigs)
      if (8 * c.token_tiles >= p.m && (tile == 0 || 8 * c.token_tiles < tile)) tile = 8 * c.token_tiles;
    std::vector<int> v;
    for (int i = 0; i < kNumConfigs; ++i)
      if (tile != 0 && 8 * kConfigs[i].token_tiles == tile) v.push_back(i);
    return v;
  }

  int m_tile(int config) const override { return 8 * kConfigs[config].token_tiles; }

  std::string supports(const GemmProblem& p, int config) const override {
    const DecodeConfig& c = kConfigs[config];
    if (p.m > 8 * c.token_tiles)
      return "config " + configs()[config] + " runs M <= " + std::to_string(8 * c.token_tiles) + ", got M=" +
             std::to_string(p.m);
    if (std::string why = common_fast_path_reason(p); !why.empty()) return why;
    if (p.n > std::numeric_limits<int32_t>::max() - 256)
      return "N must be < 2^31 - 256 (int32 row indices), got N=" + std::to_string(p.n);
    if (p.k > (int64_t{1} << 31) - 1 - dk::kKBlock) return "K must be < 2^31 - 128, got K=" + std::to_string(p.k);
    if (p.out != DType::bf16 && p.out != DType::f16) return "out must be bf16 or f16";
    if (p.scale == ScaleKind::block) {
      // The launcher's split rule must find a split count whose scale slices fit (any GPU).
      Slots any{};
      any.fill(std::numeric_limits<int>::max());
      if (plan_splits(p, kernels_table()[config].rows, any).splits == 0)
        return "block scales: K=" + std::to_string(p.k) + " at M=" + std::to_string(p.m) +
               " needs more than 8 K splits for the scale slices to fit shared memory";
    }
    return sm90_device_reason();
  }

  void run(const GemmProblem& p, const GemmOperands& ops, int config, cudaStream_t stream) const override {
    run_with(p, ops, config, RunOptions{}, stream);
  }

  void run_with(const GemmProblem& p, const GemmOperands& ops, int config, const RunOptions& opt,
                cudaStream_t stream) const override {
    const DeviceInfo& dev = device_info();
    const KernelInfo& k = kernels_table()[config];
    const Slots& slots = resident_blocks(config, dev);
    const Launch l = plan_splits(p, k.rows, slots);
    const Ring ring = ring_of(k, p, opt.static_weight, l, slots, dev);
    dk::Params kp{};
    kp.sa = ops.sa, kp.sb = ops.sb, kp.bias = ops.bias, kp.out = ops.out, kp.ldo = ops.ldo;
    kp.m = static_cast<int>(p.m), kp.n = static_cast<int>(p.n);
    kp.kblocks = static_cast<int>(ceil_div(p.k, dk::kKBlock));
    kp.split_kblocks = l.split_kblocks;
    kp.splits = l.splits;
    kp.scale_kind = static_cast<int>(p.scale);
    kp.sa_vector = p.sa_vector, kp.sb_vector = p.sb_vector;
    kp.sa_ld = static_cast<int>((p.m + 3) / 4 * 4);
    kp.sb_ld = p.sb_padded ? (kp.kblocks + 3) / 4 * 4 : kp.kblocks;
    kp.prefetch_weight = opt.static_weight;
    kp.ring = ring.stages;
    kp.scale_bytes = ring.scale_bytes;
    const CUtensorMap wmap = byte_matrix_map(ops.b, p.n, p.k, ops.ldb, k.rows, "decode");
    const CUtensorMap amap = byte_matrix_map(ops.a, p.m, p.k, ops.lda, k.max_m, "decode");
    const Kernel kernel = k.kernel[p.out == DType::bf16 ? 0 : 1];
    allow_dynamic_smem(reinterpret_cast<const void*>(kernel), k.smem_allowed(), dev.index);
    LaunchShape s;
    s.grid = dim3(l.row_blocks, l.splits);
    s.block = dim3(dk::kThreads);
    s.smem = ring.smem(k);
    if (l.splits > 1) s.cluster = dim3(1, l.splits, 1);
    s.pdl = true;
    FP8ROUTE_TRACE(kp.trace = chain_trace::next(
                       ("decode " + configs()[config] + (ring.stages != k.stages ? " ring" + std::to_string(ring.stages) : "")).c_str(),
                       s.grid, s.block, s.smem, s.cluster);)
    launch_kernel(kernel, s, stream, wmap, amap, kp);
  }
};

}  // namespace

void set_decode_deep_ring(bool enabled) { deep_ring_flag().store(enabled, std::memory_order_relaxed); }
bool decode_deep_ring() { return deep_ring_flag().load(std::memory_order_relaxed); }

const GemmBackend& decode_backend() {
  static const DecodeBackend b;
  return b;
}

}  // namespace fp8route::gemm
