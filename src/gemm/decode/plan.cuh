#pragma once
// Host planning shared by the decode launchers (gemm/decode/decode.cu, moe/decode/decode.cu): the
// resident block counts by cluster size and the split-K search with its cost model.

#include <algorithm>
#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "core/launch.h"
#include "fp8route/device.h"
#include "fp8route/tuning/cuda_check.h"
#include "gemm/decode/parts.cuh"

namespace fp8route::decode_plan {

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// A decode kernel config.
struct Config {
  int token_tiles;  // 8 tokens each: the config runs M (a group's rows) <= 8 * token_tiles
  int row_tiles;    // 16 weight rows each, per consumer warp (4 warps per block)
  int stages;       // [rows x 128 B] weight tiles in flight per block
};
constexpr int max_m(const Config& c) { return 8 * c.token_tiles; }
constexpr int rows(const Config& c) { return 16 * c.row_tiles * kernels::decode::kConsumerWarps; }
inline std::string config_name(const Config& c) {
  return "m" + std::to_string(max_m(c)) + "_n" + std::to_string(rows(c)) + "_s" + std::to_string(c.stages);
}

// Blocks resident on the whole GPU at once, by cluster size (1..kMaxSplits): a cluster's blocks
// share a GPC, so with clusters this can be fewer than blocks-per-SM x SMs.
using Slots = std::array<int, kernels::decode::kMaxSplits + 1>;

inline Slots query_slots(const void* kernel, int smem, int sm_count) {
  constexpr int kThreads = kernels::decode::kThreads;
  Slots s{};
  int per_sm = 0;
  FP8ROUTE_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, smem));
  s[1] = per_sm * sm_count;
  for (int c = 2; c <= kernels::decode::kMaxSplits; ++c) s[c] = resident_cluster_blocks(kernel, kThreads, smem, c);
  return s;
}

// Slots per (config, device), queried once (query() -> Slots) and kept.
class SlotsCache {
 public:
  template <class Query>
  const Slots& get(int config, int device, Query query) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (auto it = cache_.find({config, device}); it != cache_.end()) return it->second;
    }
    const Slots s = query();
    std::lock_guard<std::mutex> lock(mu_);
    return cache_.emplace(std::pair{config, device}, s).first->second;
  }

 private:
  std::mutex mu_;
  std::map<std::pair<int, int>, Slots> cache_;
};

struct Split {
  int splits = 0, split_kblocks = 0;
};

// s splits of kblocks K blocks, where they can run: s equal shares of K (no empty split), the
// share's block-scale slices fit (fits), and a cluster of s blocks is resident (slots[s]; fewer
// slots than one cluster's blocks: none is, and waves() would divide by zero). Else splits = 0.
// s in [1, kMaxSplits].
template <class Fits>
Split split_of(int64_t kblocks, int64_t s, const Slots& slots, Fits fits) {
  const int64_t skb = ceil_div(kblocks, s);
  if (ceil_div(kblocks, skb) != s || !fits(skb) || slots[s] < s) return {};
  return {static_cast<int>(s), static_cast<int>(skb)};
}

// The split-K rule, from the resident block counts alone (so that CPU tests can check it). The
// time of a launch is taken as waves x (K blocks per block + a fixed start and end), plus the
// cluster reduction when K is split: more splits fill the resident slots (and the last wave) with
// shorter blocks. The splits of a row range form one cluster, whose blocks must be resident at
// once on one GPC (slots[s]). fits(K blocks per split): the split's block-scale slices fit shared
// memory; waves(splits): the launcher's waves at that split. splits = 0: no split count fits.
template <class Fits, class Waves>
Split best_split(int64_t kblocks, const Slots& slots, Fits fits, Waves waves) {
  constexpr double kStartEnd = 2;  // K blocks' worth of streaming: a block's first load and its stores
  constexpr double kReduce = 1;    // the cluster barriers and the read of the peers' sums
  const int64_t max_splits = std::min<int64_t>(kernels::decode::kMaxSplits, kblocks);
  Split best;
  double best_cost = 0;
  for (int64_t s = 1; s <= max_splits; ++s) {
    const Split c = split_of(kblocks, s, slots, fits);
    if (c.splits == 0) continue;
    const double cost = double(waves(s)) * (double(c.split_kblocks) + kStartEnd) + (s > 1 ? kReduce : 0);
    if (best.splits == 0 || cost < best_cost) {
      best_cost = cost;
      best = c;
    }
  }
  return best;
}

}  // namespace fp8route::decode_plan
