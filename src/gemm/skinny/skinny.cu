// The skinny backend: launcher of kernel.cuh (sm90_fp8_gemm_skinny; small M, weight-read bound).
// Holds the config list, the requirements (supports), the split-K rule and the split-K workspace
// (per stream, or per captured graph: core/workspace.h).

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <iterator>
#include <limits>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "fp8route/tuning/chain_trace.h"
#include "core/launch.h"
#include "fp8route/tuning/cuda_check.h"
#include "fp8route/device.h"
#include "fp8route/error.h"
#include "gemm/skinny/kernel.cuh"
#include "gemm/backend.h"
#include "core/workspace.h"

namespace fp8route::gemm {
namespace {

struct SkinnyConfig {
  int token_tiles;  // 8 tokens each: the config runs M <= 8 * token_tiles
  int row_tiles;    // 16 weight rows each, per block; the block's other warps split its K slice
  int stages;       // K blocks of 128 in flight per warp
};

// The configs, listed once. More weight rows per block for more tokens: each block reads its
// activations once, so rows per block / M bounds that traffic relative to the weight's. Fewer
// stages as the accumulators grow (registers: 2 blocks of 256 threads per SM, 128 each; ptxas
// 13.0 fits the first three without spilling, m64 spills ~100 bytes).
constexpr SkinnyConfig kConfigs[] = {
    {1, 2, 4},  // m8_n32
    {2, 4, 3},  // m16_n64
    {4, 8, 2},  // m32_n128
    {8, 8, 2},  // m64_n128
};
constexpr int kNumConfigs = static_cast<int>(std::size(kConfigs));

std::string config_name(const SkinnyConfig& c) {
  return "m" + std::to_string(8 * c.token_tiles) + "_n" + std::to_string(16 * c.row_tiles) + "_k128x" +
         std::to_string(c.stages) + "_splitk";
}

// Blocks per SM the kernel is built for (__launch_bounds__(256, 2)): 2 x 8 warps, each with
// (stages - 1) x 2 KB of weight in flight, cover HBM latency.
constexpr int kBlocksPerSm = 2;
// Activations of a K slice per block, at most: two blocks per SM fit (227 KB), and the slices are
// long enough that the shared memory, not the SM count, rarely sets the number of splits.
constexpr int kSmemBytes = 96 * 1024;
constexpr int64_t kMaxKBlocks = 65535;  // splits go in gridDim.y
constexpr int kMaxClusterSplits = kernels::kSkinnyMaxClusterSplits;

// Every skinny kernel is launched with up to the same shared-memory budget.
void allow_smem(void (*kernel)(kernels::SkinnyParams), int device) {
  allow_dynamic_smem(reinterpret_cast<const void*>(kernel), kSmemBytes, device);
}

// Blocks resident on the whole GPU at once, by cluster size (index 1..kMaxClusterSplits): a
// cluster's blocks must share a GPC, so for clusters this can be fewer than kBlocksPerSm per SM.
// Measured once per device with cudaOccupancyMaxActiveClusters at the shared-memory budget (every
// config has the same launch bounds and budget).
using Slots = std::array<int, kMaxClusterSplits + 1>;
const Slots& resident_blocks(const DeviceInfo& dev) {
  static std::mutex mu;
  static std::map<int, Slots> by_device;
  std::lock_guard<std::mutex> lock(mu);
  auto it = by_device.find(dev.index);
  if (it != by_device.end()) return it->second;
  Slots s{};
  s[1] = kBlocksPerSm * dev.sm_count;
  const auto kernel = &kernels::sm90_fp8_gemm_skinny<__nv_bfloat16, kConfigs[0].token_tiles, kConfigs[0].row_tiles,
                                                      kConfigs[0].stages, true>;
  allow_smem(kernel, dev.index);
  for (int c = 2; c <= kMaxClusterSplits; ++c)
    s[c] = resident_cluster_blocks(reinterpret_cast<const void*>(kernel), kernels::kSkinnyThreads, kSmemBytes, c);
  return by_device.emplace(dev.index, s).first->second;
}

struct Launch {
  int row_blocks, splits, split_kblocks;
  bool cluster;     // the splits of a row range form one cluster (1 < splits <= kMaxClusterSplits)
  size_t act_smem;  // the activations of one K slice
};

// The split-K rule: enough blocks for kBlocksPerSm per SM (fewer splits when N alone gives that),
// K slices of whole 128-wide blocks (block scales are applied per K block before any sum), and
// slices no longer than the activations' shared-memory budget allows. The splits of a row range
// form a cluster when all the clusters fit the GPU at once (resident_blocks), else they meet in
// global memory: a cluster launch that needs a second wave is slower than the global path, and
// splitting K further to fill the last wave (more, shorter blocks) is slower still: each block pays
// a fixed start (first HBM round trip) and end (the sums) that short K slices do not amortize
// (docs/design.md, "Measurements behind the rules").
Launch plan(const GemmProblem& p, const SkinnyConfig& c, const DeviceInfo& dev) {
  Launch l;
  const int rows = 16 * c.row_tiles;
  const int64_t kblocks = (p.k + kernels::kSkinnyKBlock - 1) / kernels::kSkinnyKBlock;
  l.row_blocks = static_cast<int>((p.n + rows - 1) / rows);
  const int64_t max_slice = std::max<int64_t>(
      1, (kSmemBytes / p.m - kernels::kSkinnyActPad) / kernels::kSkinnyKBlock);
  int64_t splits = std::max<int64_t>(1, int64_t{kBlocksPerSm} * dev.sm_count / l.row_blocks);
  splits = std::max(std::min(splits, kblocks), (kblocks + max_slice - 1) / max_slice);
  l.split_kblocks = static_cast<int>((kblocks + splits - 1) / splits);
  l.splits = static_cast<int>((kblocks + l.split_kblocks - 1) / l.split_kblocks);
  l.cluster = l.splits > 1 && l.splits <= kMaxClusterSplits &&
              int64_t{l.row_blocks} * l.splits <= resident_blocks(dev)[l.splits];
  l.act_smem = size_t(p.m) * (l.split_kblocks * kernels::kSkinnyKBlock + kernels::kSkinnyActPad);
  return l;
}

template <class OutT, int I>
void launch(const kernels::SkinnyParams& params, const Launch& l, int device, cudaStream_t stream) {
  constexpr SkinnyConfig c = kConfigs[I];
  using Traits = kernels::SkinnyTraits<c.token_tiles, c.row_tiles, c.stages>;
  static_assert(Traits::kRedBytes <= kSmemBytes, "the K-group reduction must fit the shared memory budget");
  const size_t smem = std::max<size_t>(l.act_smem, Traits::kRedBytes);  // the reduction reuses it
  const dim3 grid(l.row_blocks, l.splits), block(kernels::kSkinnyThreads);
  kernels::SkinnyParams k = params;
  FP8ROUTE_TRACE(k.trace = chain_trace::next(("skinny " + config_name(c)).c_str(), grid, block, smem,
                                             l.cluster ? dim3(1, l.splits, 1) : dim3(0, 0, 0));)
  if (l.cluster) {
    const auto kernel = &kernels::sm90_fp8_gemm_skinny<OutT, c.token_tiles, c.row_tiles, c.stages, true>;
    allow_smem(kernel, device);
    launch_kernel(kernel, LaunchShape{grid, block, smem, dim3(1, l.splits, 1), /*pdl=*/true}, stream, k);
  } else {
    const auto kernel = &kernels::sm90_fp8_gemm_skinny<OutT, c.token_tiles, c.row_tiles, c.stages, false>;
    allow_smem(kernel, device);
    launch_kernel(kernel, LaunchShape{grid, block, smem, dim3(0, 0, 0), /*pdl=*/true}, stream, k);
  }
}

using LaunchFn = void (*)(const kernels::SkinnyParams&, const Launch&, int device, cudaStream_t);

template <int... I>
constexpr std::array<std::array<LaunchFn, 2>, kNumConfigs> make_table(std::integer_sequence<int, I...>) {
  return {{std::array<LaunchFn, 2>{&launch<__nv_bfloat16, I>, &launch<__half, I>}...}};
}
constexpr auto kLaunch = make_table(std::make_integer_sequence<int, kNumConfigs>{});

class SkinnyBackend final : public GemmBackend {
 public:
  std::string_view name() const override { return "skinny"; }

  const std::vector<std::string>& configs() const override {
    static const std::vector<std::string> names = config_names(kConfigs);
    return names;
  }

  std::vector<int> probe_configs(const GemmProblem& /*p*/) const override { return all_configs(); }

  // A block holds every token of the call (M <= 8 * token_tiles): one tile along M.
  int m_tile(int config) const override { return 8 * kConfigs[config].token_tiles; }

  std::string supports(const GemmProblem& p, int config) const override {
    const SkinnyConfig& c = kConfigs[config];
    if (p.m > 8 * c.token_tiles)
      return "config " + configs()[config] + " runs M <= " + std::to_string(8 * c.token_tiles) +
             " (tokens per block), got M=" + std::to_string(p.m);
    if (std::string why = common_fast_path_reason(p); !why.empty()) return why;
    if (std::string why = unpadded_scale_b_reason(p); !why.empty()) return "skinny " + why;
    if (p.k % 16 != 0)
      return "needs K % 16 == 0 (16-byte loads of a's and b's rows), got K=" + std::to_string(p.k);
    if (p.n > std::numeric_limits<int32_t>::max() - 128)
      return "N must be < 2^31 - 128 (int32 row indices), got N=" + std::to_string(p.n);
    if ((p.k + kernels::kSkinnyKBlock - 1) / kernels::kSkinnyKBlock > kMaxKBlocks)
      return "K must be <= 65535 * 128 (K splits go in gridDim.y), got K=" + std::to_string(p.k);
    if (p.out != DType::bf16 && p.out != DType::f16) return "out must be bf16 or f16";
    return sm90_device_reason();
  }

  void run(const GemmProblem& p, const GemmOperands& ops, int config, cudaStream_t stream) const override {
    run_with(p, ops, config, RunOptions{}, stream);
  }

  void run_with(const GemmProblem& p, const GemmOperands& ops, int config, const RunOptions& opt,
                cudaStream_t stream) const override {
    const DeviceInfo& dev = device_info();
    const Launch l = plan(p, kConfigs[config], dev);
    kernels::SkinnyParams k{};
    k.a = ops.a, k.b = ops.b, k.sa = ops.sa, k.sb = ops.sb, k.bias = ops.bias, k.out = ops.out;
    k.lda = ops.lda, k.ldb = ops.ldb, k.ldo = ops.ldo;
    k.m = static_cast<int>(p.m), k.n = static_cast<int>(p.n), k.k = static_cast<int>(p.k);
    k.kblocks = static_cast<int>((p.k + kernels::kSkinnyKBlock - 1) / kernels::kSkinnyKBlock);
    k.split_kblocks = l.split_kblocks;
    k.splits = l.splits;
    k.scale_kind = static_cast<int>(p.scale);
    k.sa_vector = p.sa_vector, k.sb_vector = p.sb_vector;
    k.sa_ld = static_cast<int>((p.m + 3) / 4 * 4);
    k.prefetch_weight = opt.static_weight;
    if (l.splits > 1 && !l.cluster) {  // splits through global memory
      const std::string who = "skinny/" + configs()[config];
      k.partial = static_cast<float*>(partials_.get(dev.index, size_t(l.splits) * p.m * p.n * 4, stream, who));
      k.counters = static_cast<int*>(counters_.get(dev.index, size_t(l.row_blocks) * 4, stream, who));
    }
    kLaunch[config][p.out == DType::bf16 ? 0 : 1](k, l, dev.index, stream);
  }

 private:
  // Split-K partials and the per-row-range arrival counters, one of each per (device, stream) or per
  // captured graph; the last block of a row range resets its counter, so a launch leaves them zero.
  // Apart, so that partials never land where a later, larger problem keeps its counters.
  mutable Workspaces partials_{"split-K workspace"};
  mutable Workspaces counters_{"split-K counter array", /*zero_new=*/true};
};

}  // namespace

const GemmBackend& skinny_backend() {
  static const SkinnyBackend b;
  return b;
}

}  // namespace fp8route::gemm
