// The grouped "decode" backend: launcher of moe/decode/kernel.cuh (groups of at most 64 rows, where
// a grouped GEMM is a read of the active experts' weights). Holds the config list, the
// requirements (supports), the split-K rule and the persistent grid size.

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <iterator>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "fp8route/tuning/chain_trace.h"
#include "fp8route/tuning/cuda_check.h"
#include "fp8route/tuning/gemm_knobs.h"
#include "core/launch.h"
#include "fp8route/device.h"
#include "fp8route/error.h"
#include "gemm/decode/plan.cuh"
#include "gemm/tensor_map.h"
#include "moe/backend.h"
#include "moe/decode/kernel.cuh"
#include "moe/sm90/launch.cuh"

namespace fp8route::moe {
namespace {

namespace dk = kernels::moe_decode;
using decode_plan::ceil_div;
using decode_plan::Slots;
static_assert(dk::kKBlock == 128, "GroupedArgs::kblocks counts 128-wide K blocks");

using DecodeConfig = decode_plan::Config;

// The configs, listed once: one per token tile, 128 weight rows (whole 128-row scale blocks), as
// many stages as keep >= 96 KB of weight in flight per SM (HBM latency x bandwidth / SMs is ~40 KB
// on an H200) within shared memory.
constexpr DecodeConfig kConfigs[] = {
    {1, 2, 8},  // m8_n128_s8
    {2, 2, 8},  // m16_n128_s8
    {4, 2, 8},  // m32_n128_s8
    {8, 2, 6},  // m64_n128_s6
};
constexpr int kNumConfigs = static_cast<int>(std::size(kConfigs));
constexpr int kMaxRows = 8 * kConfigs[kNumConfigs - 1].token_tiles;

// Active experts the split rule plans for when the host cannot bound them (masked form): a decode
// step of one token activates top-k experts, 8 in every catalog model; planning for the fewest
// active experts fills the GPU where that matters most, and more active experts only pay a cluster
// reduction per item.
constexpr int64_t kPlannedActive = 8;

using Kernel = void (*)(const CUtensorMap, const CUtensorMap, const dk::Params);

template <class OutT, int I>
constexpr Kernel kernel_of() {
  constexpr DecodeConfig c = kConfigs[I];
  return &dk::sm90_fp8_grouped_decode<OutT, c.token_tiles, c.row_tiles, c.stages>;
}

template <int I>
constexpr int smem_of() {
  constexpr DecodeConfig c = kConfigs[I];
  return dk::Traits<c.token_tiles, c.row_tiles, c.stages>::kSmemBytes;
}

struct KernelInfo {
  Kernel kernel[2];  // bf16, f16
  int smem;
  int rows, max_m;
};

template <int... I>
std::array<KernelInfo, kNumConfigs> make_table(std::integer_sequence<int, I...>) {
  return {{KernelInfo{{kernel_of<__nv_bfloat16, I>(), kernel_of<__half, I>()}, smem_of<I>(),
                      decode_plan::rows(kConfigs[I]), decode_plan::max_m(kConfigs[I])}...}};
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
    for (const Kernel fn : k.kernel) allow_dynamic_smem(reinterpret_cast<const void*>(fn), k.smem, dev.index);
    return decode_plan::query_slots(reinterpret_cast<const void*>(k.kernel[0]), k.smem, dev.sm_count);
  });
}

// Rows of the largest group any routing can make.
int64_t max_group_rows(const GroupedProblem& p) { return p.rows; }

int config_for(const GroupedProblem& p) {
  for (int i = 0; i < kNumConfigs; ++i)
    if (8 * kConfigs[i].token_tiles >= max_group_rows(p)) return i;
  return -1;
}

struct Launch {
  int clusters = 0, splits = 0, split_kblocks = 0;
};

// The dense decode backend's split-K rule (decode_plan::best_split) on the items of the experts
// planned active, a cluster per item at a time. Block scales: a split's sa slice [kb][max M] and
// sb slice must fit their shared memory. splits = 0: no split count fits.
Launch plan(const GroupedProblem& p, int config, const Slots& slots) {
  const KernelInfo& k = kernels_table()[config];
  const int64_t kblocks = ceil_div(p.k, dk::kKBlock);
  const int64_t row_blocks = ceil_div(p.n, k.rows);
  const int64_t active = std::min<int64_t>(
      p.experts, p.form == GroupedForm::contiguous ? std::max<int64_t>(p.rows, 1) : kPlannedActive);
  const int64_t items = row_blocks * active;
  auto fits = [&](int64_t skb) {
    return p.scale != ScaleKind::block ||
           (skb * k.max_m * 4 <= dk::kSaBytes && skb * 4 <= dk::kSbBytes);
  };
  auto waves = [&](int64_t splits) { return ceil_div(items, slots[splits] / splits); };
  decode_plan::Split s = decode_plan::best_split(kblocks, slots, fits, waves);
  // The split-count knob (gemm_knobs.h), where that count can run (split_of refuses more than kblocks).
  if (const int asked = grouped_decode_splits(); asked > 0)
    if (const decode_plan::Split a = decode_plan::split_of(kblocks, asked, slots, fits); a.splits > 0) s = a;
  Launch l;
  l.splits = s.splits;
  l.split_kblocks = s.split_kblocks;
  // Every item of every expert has a cluster when the GPU holds that many; never more.
  if (s.splits > 0) l.clusters = static_cast<int>(std::min<int64_t>(slots[s.splits] / s.splits, row_blocks * p.experts));
  return l;
}

class DecodeBackend final : public GroupedBackend {
 public:
  std::string_view name() const override { return "decode"; }

  std::string supports(const GroupedProblem& p) const override {
    if (max_group_rows(p) > kMaxRows)
      return "decode: groups of at most " + std::to_string(kMaxRows) + " rows (masked M_max or contiguous M_total), got " +
             std::to_string(p.rows);
    if (std::string why = sm90_operands_reason(p, "decode", dk::kMaxExperts); !why.empty()) return why;
    if (p.scale == ScaleKind::block) {
      Slots any{};
      any.fill(1 << 20);
      if (plan(p, config_for(p), any).splits == 0)
        return "decode: block scales at K=" + std::to_string(p.k) + " need more than 8 K splits for the scale slices";
    }
    return sm90_device_reason("decode");
  }

  void run(const GroupedProblem& p, const GroupedOperands& ops, cudaStream_t stream) const override {
    const DeviceInfo& dev = device_info(-1);
    const int config = config_for(p);
    const KernelInfo& k = kernels_table()[config];
    const Launch l = plan(p, config, resident_blocks(config, dev));
    FP8ROUTE_CHECK_CAT(l.splits > 0 && l.clusters > 0, ErrorCategory::cuda_error,
                       "decode: no cluster of the planned split fits on this GPU for " << to_string(p));
    dk::Params kp{};
    set_grouped_args(kp, p, ops);
    kp.split_kblocks = l.split_kblocks;
    kp.splits = l.splits;
    kp.row_blocks = static_cast<int>(ceil_div(p.n, k.rows));
    const CUtensorMap wmap = gemm::batched_byte_matrix_map(ops.b, p.experts, p.n, p.k, k.rows, "grouped decode");
    const CUtensorMap amap = gemm::byte_matrix_map(ops.a, a_rows(p), p.k, p.k, 8, "grouped decode");
    const Kernel kernel = k.kernel[p.out == DType::bf16 ? 0 : 1];
    allow_dynamic_smem(reinterpret_cast<const void*>(kernel), k.smem, dev.index);
    LaunchShape s;
    s.grid = dim3(static_cast<unsigned>(l.clusters), static_cast<unsigned>(l.splits));
    s.block = dim3(dk::kThreads);
    s.smem = k.smem;
    if (l.splits > 1) s.cluster = dim3(1, l.splits, 1);
    s.pdl = true;
    FP8ROUTE_TRACE(kp.trace = chain_trace::next("grouped decode", s.grid, s.block, s.smem, s.cluster));
    launch_kernel(kernel, s, stream, wmap, amap, kp);
  }
};

std::atomic<int>& splits_knob() {
  static std::atomic<int> splits{0};
  return splits;
}

}  // namespace

void set_grouped_decode_splits(int splits) {
  FP8ROUTE_CHECK(splits >= 0 && splits <= dk::kMaxSplits,
                 "splits: 0 (the rule) or 1.." << dk::kMaxSplits << ", got " << splits);
  splits_knob().store(splits, std::memory_order_relaxed);
}
int grouped_decode_splits() { return splits_knob().load(std::memory_order_relaxed); }

const GroupedBackend& decode_backend() {
  static const DecodeBackend b;
  return b;
}

}  // namespace fp8route::moe
