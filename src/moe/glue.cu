// The decode glue of an MoE layer (moe.h, "Decode glue"; docs/moe.md): softmax routing, masked
// dispatch and the weighted combine, one kernel each, with their argument checks. The activation
// scatter quant that sits between dispatch and the first grouped GEMM is a quant op
// (quant.h: scatter_per_token_quant, scatter_per_token_group_quant).
//
// Arithmetic: IEEE fp32 round-to-nearest (expf, __fdiv_rn, __fmul_rn, __fadd_rn: no contraction to
// FMA, so that the combine equals torch's multiply-then-add bit for bit).

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>

#include "core/chain_trace.cuh"
#include "core/checks.h"
#include "core/griddep.cuh"
#include "core/launch.h"
#include "fp8route/moe.h"
#include "fp8route/tuning/chain_trace.h"
#include "fp8route/tuning/cuda_check.h"
#include "quant/common.cuh"
#include "quant/launch_common.h"

namespace fp8route::kernels {

// ---- softmax top-k: one warp per token ------------------------------------------------------------

constexpr int kTopkWarps = 4;

template <class InT>
__device__ __forceinline__ float logit(const InT* row, int e) {
  if constexpr (sizeof(InT) == 4) return row[e];
  else return static_cast<float>(row[e]);
}

// A float's bits as an unsigned that orders as the float does (negative values reversed), but for
// -0 < +0 and NaN: the callers' values are neither NaN nor -0.
__device__ __forceinline__ unsigned ordered_bits(float v) {
  const unsigned b = __float_as_uint(v);
  return b & 0x80000000u ? ~b : b | 0x80000000u;
}
__device__ __forceinline__ float from_ordered_bits(unsigned u) {
  return __uint_as_float(u & 0x80000000u ? u & 0x7FFFFFFFu : ~u);
}

// The warp's best of each lane's (best, bi): the larger value first, then the lower index; every
// lane gets it. Two warp reductions (the values' ordered bits, then the indices holding the
// maximum) in place of a shuffle tree of comparisons; the same winner.
__device__ __forceinline__ void warp_argmax(float& best, int& bi) {
  const unsigned mine = ordered_bits(best);
  const unsigned top = __reduce_max_sync(0xffffffffu, mine);
  bi = static_cast<int>(__reduce_min_sync(0xffffffffu, mine == top ? static_cast<unsigned>(bi) : 0xFFFFFFFFu));
  best = from_ordered_bits(top);
}

// top_k rounds of a warp arg-max over v[0, n) (larger value first, then the lower index; `floor` is
// below every value still choosable), each round's winner set to `taken`. Lane k gets round k's
// index and weight_of(index, value); total is the weights' sum in round order (every lane).
template <class WeightOf>
__device__ __forceinline__ void warp_topk(float* v, int n, int top_k, float floor, float taken, int lane,
                                          WeightOf weight_of, float& w_mine, int& id_mine, float& total) {
  w_mine = 0.0f, id_mine = 0, total = 0.0f;
  for (int k = 0; k < top_k; ++k) {
    float best = floor;
    int bi = n;
    for (int e = lane; e < n; e += 32)  // ascending e: a tie keeps the lower index
      if (v[e] > best) best = v[e], bi = e;
    warp_argmax(best, bi);
    const float w = weight_of(bi, best);
    if (lane == k) w_mine = w, id_mine = bi;
    total = __fadd_rn(total, w);
    if (bi % 32 == lane) v[bi] = taken;  // the lane that holds it (every index < n has one)
    __syncwarp();
  }
}

// One token's softmax top-k by one warp: its E probabilities in the warp's shared memory p, then
// top_k rounds of a (value, index) arg-max over the warp (larger value first, then the lower index),
// each round's winner marked taken (-1, below every probability). A NaN probability is kept as -0.5
// (below every real one, above a taken one), so that ids stay in [0, E) whatever the logits.
template <class InT>
__device__ __forceinline__ int softmax_topk_token(const InT* row, int experts, int top_k, bool renormalize, float* p,
                                                  int lane, float* weights_t, int32_t* ids_t) {
  float m = -INFINITY;
  for (int e = lane; e < experts; e += 32) {
    p[e] = logit(row, e);
    m = fmaxf(m, p[e]);
  }
  for (int off = 16; off > 0; off >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, off));
  float sum = 0.0f;
  for (int e = lane; e < experts; e += 32) {
    p[e] = expf(__fsub_rn(p[e], m));
    sum = __fadd_rn(sum, p[e]);
  }
  for (int off = 16; off > 0; off >>= 1) sum = __fadd_rn(sum, __shfl_xor_sync(0xffffffffu, sum, off));
  for (int e = lane; e < experts; e += 32) {
    const float v = __fdiv_rn(p[e], sum);
    p[e] = isnan(v) ? -0.5f : v;
  }
  __syncwarp();
  float w_mine, total;
  int id_mine;
  warp_topk(p, experts, top_k, -2.0f, -1.0f, lane, [](int, float best) { return best; }, w_mine, id_mine, total);
  if (lane < top_k) {
    weights_t[lane] = renormalize ? __fdiv_rn(w_mine, total) : w_mine;
    ids_t[lane] = id_mine;
  }
  return id_mine;
}

// ---- DeepSeek-V3 grouped top-k: one warp per token ------------------------------------------------

constexpr int kGroupedTopkMaxGroups = 32;  // a group per lane when the groups are ranked

// One token's grouped top-k by one warp: s = sigmoid(logit) and the choice score c = s + bias
// (clamped to >= -FLT_MAX, so that a NaN or -inf score is the lowest choosable, never outside [0, E))
// in the warp's 2E floats of shared memory s; each group scored by the sum of its two best c; the
// topk_group best groups kept; then top_k rounds of a (c, index) arg-max over the kept groups'
// experts, each winner marked taken (-inf). Weights: s of the chosen, over their sum when
// renormalize, times scaling.
template <class InT>
__device__ __forceinline__ int grouped_topk_token(const InT* row, const float* bias, int experts, int n_group,
                                                   int topk_group, int top_k, bool renormalize, float scaling,
                                                   float* s, int lane, float* weights_t, int32_t* ids_t) {
  float* c = s + experts;
  for (int e = lane; e < experts; e += 32) {
    const float x = logit(row, e);
    s[e] = __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-x)));
    c[e] = fmaxf(__fadd_rn(s[e], bias[e]), -FLT_MAX);  // fmaxf(NaN, y) = y
  }
  __syncwarp();
  // Group scores: the lane of group g keeps it (n_group <= 32).
  const int gsize = experts / n_group;
  float my_score = -INFINITY;
  for (int g = 0; g < n_group; ++g) {
    float b1 = -INFINITY, b2 = -INFINITY;  // this lane's two best of the group
    for (int e = g * gsize + lane; e < (g + 1) * gsize; e += 32) {
      const float v = c[e];
      if (v > b1) b2 = b1, b1 = v;
      else if (v > b2) b2 = v;
    }
    for (int off = 16; off > 0; off >>= 1) {
      const float o1 = __shfl_xor_sync(0xffffffffu, b1, off), o2 = __shfl_xor_sync(0xffffffffu, b2, off);
      const float hi = fmaxf(b1, o1);
      b2 = fmaxf(fminf(b1, o1), fmaxf(b2, o2));
      b1 = hi;
    }
    if (lane == g) my_score = __fadd_rn(b1, b2);
  }
  // The topk_group best groups (ties: the lower group), as a bit mask.
  unsigned keep = 0;
  float gs = lane < n_group ? my_score : -INFINITY;
  bool taken_group = lane >= n_group;
  for (int r = 0; r < topk_group; ++r) {
    float best = taken_group ? -INFINITY : gs;
    int bi = taken_group ? kGroupedTopkMaxGroups : lane;
    warp_argmax(best, bi);
    keep |= 1u << bi;
    if (lane == bi) taken_group = true;
  }
  for (int e = lane; e < experts; e += 32)
    if (!((keep >> (e / gsize)) & 1u)) c[e] = -INFINITY;
  __syncwarp();
  // The weight is s of the winner; it is always an expert (< E): the kept groups hold at least
  // top_k choosable ones, each above -inf.
  float w_mine, total;
  int id_mine;
  warp_topk(c, experts, top_k, -INFINITY, -INFINITY, lane, [s](int i, float) { return s[i]; }, w_mine, id_mine,
            total);
  if (lane < top_k) {
    const float w = renormalize ? __fdiv_rn(w_mine, total) : w_mine;
    weights_t[lane] = __fmul_rn(w, scaling);
    ids_t[lane] = id_mine;
  }
  return id_mine;
}

// ---- the routing kernels: one warp per token -----------------------------------------------------

struct RouteParams {
  const void* logits;
  const float* bias;  // sigmoid routing; null: softmax
  int tokens, experts_global, n_group, topk_group, top_k;
  bool renormalize;
  float scaling;
  int route_warps;  // route_masked_dispatch_kernel: the warps that route
  float* weights;
  int32_t* ids;
  FP8ROUTE_TRACE_FIELD  // route_masked_dispatch_kernel, in a chain-trace build
};

// Floats of shared-memory scratch one token's routing needs.
__host__ __device__ constexpr int route_floats(bool sigmoid, int experts) { return sigmoid ? 2 * experts : experts; }

// Token t's routing by one warp, into r.weights and r.ids; lane j < top_k also gets id j.
template <class InT, bool kSigmoid>
__device__ __forceinline__ int route_token(const RouteParams& r, int t, float* scratch, int lane) {
  const InT* row = static_cast<const InT*>(r.logits) + static_cast<int64_t>(t) * r.experts_global;
  float* w = r.weights + static_cast<int64_t>(t) * r.top_k;
  int32_t* id = r.ids + static_cast<int64_t>(t) * r.top_k;
  if constexpr (kSigmoid)
    return grouped_topk_token(row, r.bias, r.experts_global, r.n_group, r.topk_group, r.top_k, r.renormalize,
                              r.scaling, scratch, lane, w, id);
  else
    return softmax_topk_token(row, r.experts_global, r.top_k, r.renormalize, scratch, lane, w, id);
}

template <class InT, bool kSigmoid>
__global__ void __launch_bounds__(kTopkWarps * 32) topk_kernel(const RouteParams r) {
  griddep_launch_dependents();
  griddep_wait();
  extern __shared__ float topk_smem[];
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int t = static_cast<int>(blockIdx.x) * kTopkWarps + warp;
  if (t >= r.tokens) return;
  route_token<InT, kSigmoid>(r, t, topk_smem + warp * route_floats(kSigmoid, r.experts_global), lane);
}

// ---- masked dispatch: one block over every entry ------------------------------------------------

constexpr int kDispatchThreads = 1024;

// Entry i's expert on this GPU: ids[i] through expert_map when given (map_len >= 0; an empty map
// drops every entry); -1 outside [0, experts).
__device__ __forceinline__ int local_expert(const int32_t* ids, int i, const int32_t* expert_map, int map_len,
                                            int experts) {
  int e = ids[i];
  if (map_len >= 0) e = e >= 0 && e < map_len ? expert_map[e] : -1;
  return e >= 0 && e < experts ? e : -1;
}

// The block's masked dispatch of ids[0, entries) into expert_of (shared memory): each entry's expert
// (after the map; -1 if dropped), then per entry pos = the earlier entries of its expert, and whether
// it is its expert's last entry, which writes the count. Quadratic in the entries (at most
// kMoeDispatchMaxEntries), with no atomics: the result is the same on every run. ids may be
// expert_of itself (each entry is read and rewritten by one thread).
__device__ __forceinline__ void masked_dispatch_block(const int32_t* ids, int entries, const int32_t* expert_map,
                                                      int map_len, int experts, int m_max, int32_t* expert_of,
                                                      int32_t* src2dst, int32_t* masked_m) {
  for (int i = static_cast<int>(threadIdx.x); i < entries; i += blockDim.x)
    expert_of[i] = local_expert(ids, i, expert_map, map_len, experts);
  for (int e = static_cast<int>(threadIdx.x); e < experts; e += blockDim.x) masked_m[e] = 0;
  __syncthreads();  // also orders the zeros above before the counts below (one block)
  for (int i = static_cast<int>(threadIdx.x); i < entries; i += blockDim.x) {
    const int e = expert_of[i];
    if (e < 0) {
      src2dst[i] = -1;
      continue;
    }
    int pos = 0;
    for (int k = 0; k < i; ++k) pos += expert_of[k] == e;
    bool last = true;
    for (int k = i + 1; k < entries && last; ++k) last = expert_of[k] != e;
    src2dst[i] = pos < m_max ? e * m_max + pos : -1;
    if (last) masked_m[e] = min(pos + 1, m_max);
  }
}

__global__ void __launch_bounds__(kDispatchThreads)
    masked_dispatch_kernel(const int32_t* ids, int entries, const int32_t* expert_map, int map_len, int experts,
                           int m_max, int32_t* src2dst, int32_t* masked_m) {
  griddep_launch_dependents();
  griddep_wait();
  __shared__ int32_t expert_of[kMoeDispatchMaxEntries];
  masked_dispatch_block(ids, entries, expert_map, map_len, experts, m_max, expert_of, src2dst, masked_m);
}

// ---- routing and masked dispatch in one block (decode) ------------------------------------------
// The first route_warps warps route the tokens (warp w: tokens w, w + route_warps, ...) with the
// routing kernels' per-token code, writing weights and ids, and the ids also into shared memory,
// where the block then dispatches them (no round trip through global memory).

template <class InT, bool kSigmoid>
__global__ void __launch_bounds__(kDispatchThreads)
    route_masked_dispatch_kernel(const RouteParams r, const int32_t* expert_map, int map_len, int experts, int m_max,
                                 int32_t* src2dst, int32_t* masked_m) {
  FP8ROUTE_TRACE_SCOPE(r.trace);
  griddep_launch_dependents();
  griddep_wait();
  FP8ROUTE_TRACE(trace_release(r.trace));
  __shared__ int32_t expert_of[kMoeDispatchMaxEntries];
  extern __shared__ float route_smem[];
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  if (warp < r.route_warps) {
    float* scratch = route_smem + warp * route_floats(kSigmoid, r.experts_global);
    for (int t = warp; t < r.tokens; t += r.route_warps) {
      const int id = route_token<InT, kSigmoid>(r, t, scratch, lane);
      if (lane < r.top_k) expert_of[t * r.top_k + lane] = id;
      __syncwarp();  // the next token reuses the scratch
    }
  }
  __syncthreads();
  masked_dispatch_block(expert_of, r.tokens * r.top_k, expert_map, map_len, experts, m_max, expert_of, src2dst,
                        masked_m);
}

// ---- contiguous dispatch: count, scan, scatter ---------------------------------------------------
// The entries are cut into chunks of kContigChunk; a chunk's kContigWarps warps each walk
// kContigWarpEntries of them in order, 32 at a time. (1) count: each chunk's entries per expert into
// workspace [chunks, E] (shared-memory atomics: a count does not depend on their order). (2) scan, one
// block: each expert's chunk counts become the rows before that chunk (exclusive, in chunk order),
// plus the rows of every lower expert: offsets. (3) scatter: per chunk, each warp's base per expert
// (the chunk's base plus the lower warps' counts), then each entry's row = its warp's base + the
// earlier entries of its expert in its warp (ranks from __match_any_sync, in lane order). Entries thus
// keep their row-major order within an expert, and nothing depends on thread timing.

constexpr int kContigWarps = 8;
constexpr int kContigWarpEntries = 128;
constexpr int kContigChunk = kContigWarps * kContigWarpEntries;
constexpr int kContigScanThreads = 1024;  // one thread per expert (E <= kMoeMaxExperts)
static_assert(kMoeMaxExperts <= kContigScanThreads);

__global__ void __launch_bounds__(kContigWarps * 32)
    contiguous_count_kernel(const int32_t* ids, int entries, const int32_t* expert_map, int map_len, int experts,
                            int32_t* counts) {
  griddep_launch_dependents();
  griddep_wait();
  __shared__ int32_t c[kMoeMaxExperts];
  for (int e = static_cast<int>(threadIdx.x); e < experts; e += blockDim.x) c[e] = 0;
  __syncthreads();
  const int begin = static_cast<int>(blockIdx.x) * kContigChunk;
  const int end = min(entries - begin, kContigChunk);
  for (int i = static_cast<int>(threadIdx.x); i < end; i += blockDim.x) {
    const int e = local_expert(ids, begin + i, expert_map, map_len, experts);
    if (e >= 0) atomicAdd(&c[e], 1);
  }
  __syncthreads();
  for (int e = static_cast<int>(threadIdx.x); e < experts; e += blockDim.x)
    counts[static_cast<int64_t>(blockIdx.x) * experts + e] = c[e];
}

__global__ void __launch_bounds__(kContigScanThreads)
    contiguous_scan_kernel(int chunks, int experts, int32_t* counts, int32_t* offsets) {
  griddep_launch_dependents();
  griddep_wait();
  __shared__ int32_t warp_sum[kContigScanThreads / 32];
  const int e = static_cast<int>(threadIdx.x), lane = e % 32, warp = e / 32;
  int total = 0;  // expert e's rows; its chunk counts become the rows before each chunk
  if (e < experts)
    for (int c = 0; c < chunks; ++c) {
      int32_t* v = counts + static_cast<int64_t>(c) * experts + e;
      const int n = *v;
      *v = total;
      total += n;
    }
  int incl = total;  // inclusive scan over e: warps, then the warp sums
  for (int off = 1; off < 32; off <<= 1) {
    const int o = __shfl_up_sync(0xffffffffu, incl, off);
    if (lane >= off) incl += o;
  }
  if (lane == 31) warp_sum[warp] = incl;
  __syncthreads();
  if (warp == 0) {
    int w = lane < static_cast<int>(blockDim.x) / 32 ? warp_sum[lane] : 0;
    for (int off = 1; off < 32; off <<= 1) {
      const int o = __shfl_up_sync(0xffffffffu, w, off);
      if (lane >= off) w += o;
    }
    warp_sum[lane] = w;  // inclusive over warps
  }
  __syncthreads();
  if (warp > 0) incl += warp_sum[warp - 1];
  if (e == 0) offsets[0] = 0;
  if (e < experts) {
    offsets[e + 1] = incl;
    const int base = incl - total;
    for (int c = 0; c < chunks; ++c) counts[static_cast<int64_t>(c) * experts + e] += base;
  }
}

__global__ void __launch_bounds__(kContigWarps * 32)
    contiguous_scatter_kernel(const int32_t* ids, int entries, const int32_t* expert_map, int map_len, int experts,
                              const int32_t* chunk_base, int32_t* src2dst) {
  griddep_launch_dependents();
  griddep_wait();
  __shared__ int32_t base[kContigWarps][kMoeMaxExperts];  // per warp: its next row of each expert
  const int tid = static_cast<int>(threadIdx.x), warp = tid / 32, lane = tid % 32;
  for (int e = tid; e < experts; e += blockDim.x)
    for (int w = 0; w < kContigWarps; ++w) base[w][e] = 0;
  __syncthreads();
  const int begin = static_cast<int>(blockIdx.x) * kContigChunk + warp * kContigWarpEntries;
  const unsigned below = (1u << lane) - 1;
  // Each step: lane's entry and expert (-1: dropped, -2: past the end), the lanes of its expert.
  const auto step = [&](int s, int& i, int& e, unsigned& match) {
    i = begin + s * 32 + lane;
    e = i < entries ? local_expert(ids, i, expert_map, map_len, experts) : -2;
    match = __match_any_sync(0xffffffffu, e);
  };
  for (int s = 0; s < kContigWarpEntries / 32; ++s) {  // this warp's count of each expert
    int i, e;
    unsigned match;
    step(s, i, e, match);
    if (e >= 0 && lane == 31 - __clz(match)) base[warp][e] += __popc(match);
    __syncwarp();
  }
  __syncthreads();
  for (int e = tid; e < experts; e += blockDim.x) {  // counts -> each warp's first row
    int row = chunk_base[static_cast<int64_t>(blockIdx.x) * experts + e];
    for (int w = 0; w < kContigWarps; ++w) {
      const int n = base[w][e];
      base[w][e] = row;
      row += n;
    }
  }
  __syncthreads();
  for (int s = 0; s < kContigWarpEntries / 32; ++s) {
    int i, e;
    unsigned match;
    step(s, i, e, match);
    const int row = e >= 0 ? base[warp][e] + __popc(match & below) : -1;
    __syncwarp();
    if (e >= 0 && lane == 31 - __clz(match)) base[warp][e] += __popc(match);
    if (e != -2) src2dst[i] = row;
    __syncwarp();
  }
}

// ---- combine: one thread per 8 elements of an output row ---------------------------------------

constexpr int kCombineThreads = 128;
constexpr int kCombineAhead = 8;

template <class OutT>
__device__ __forceinline__ void store8(OutT* out, const float (&acc)[kQuantVec]) {
  if constexpr (sizeof(OutT) == 4) {
    reinterpret_cast<float4*>(out)[0] = make_float4(acc[0], acc[1], acc[2], acc[3]);
    reinterpret_cast<float4*>(out)[1] = make_float4(acc[4], acc[5], acc[6], acc[7]);
  } else {
    uint4 w;
    auto* h = reinterpret_cast<typename HalfPair<OutT>::type*>(&w);
#pragma unroll
    for (int i = 0; i < kQuantVec / 2; ++i) {
      if constexpr (std::is_same_v<OutT, __half>) h[i] = __floats2half2_rn(acc[2 * i], acc[2 * i + 1]);
      else h[i] = __floats2bfloat162_rn(acc[2 * i], acc[2 * i + 1]);
    }
    *reinterpret_cast<uint4*>(out) = w;
  }
}

// Output vector v (kQuantVec values) of token t.
template <class RowT, class OutT>
__device__ __forceinline__ void combine_vector(const RowT* rows, int64_t row_count, int hidden, const int32_t* src2dst,
                                               const float* weights, int top_k, OutT* out, int64_t t, int v) {
  float acc[kQuantVec] = {};
  // kCombineAhead entries at a time: their rows and weights, then every row's vector loaded before
  // the sums (two memory latencies per batch, not two per entry); the sums in entry order.
  for (int j0 = 0; j0 < top_k; j0 += kCombineAhead) {
    int32_t d[kCombineAhead];
    float w[kCombineAhead];
#pragma unroll
    for (int u = 0; u < kCombineAhead; ++u) {
      d[u] = j0 + u < top_k ? src2dst[t * top_k + j0 + u] : -1;
      if (d[u] >= row_count) d[u] = -1;  // dropped: its row is never read
      w[u] = d[u] >= 0 ? weights[t * top_k + j0 + u] : 0.0f;
    }
    Raw8<RowT> raw[kCombineAhead];
#pragma unroll
    for (int u = 0; u < kCombineAhead; ++u)
      if (d[u] >= 0) raw[u] = load_raw8(rows + static_cast<int64_t>(d[u]) * hidden + v * kQuantVec);
#pragma unroll
    for (int u = 0; u < kCombineAhead; ++u) {
      if (d[u] < 0) continue;
      float x[kQuantVec];
      to_float8(raw[u], x);
#pragma unroll
      for (int i = 0; i < kQuantVec; ++i) acc[i] = __fadd_rn(acc[i], __fmul_rn(x[i], w[u]));
    }
  }
  store8(out + t * hidden + v * kQuantVec, acc);
}

template <class RowT, class OutT>
__global__ void __launch_bounds__(kCombineThreads)
    combine_kernel(const RowT* rows, int64_t row_count, int hidden, const int32_t* src2dst, const float* weights,
                   int top_k, OutT* out FP8ROUTE_TRACE(, TraceSlot* trace)) {
  FP8ROUTE_TRACE_SCOPE(trace);
  griddep_launch_dependents();
  griddep_wait();
  FP8ROUTE_TRACE(trace_release(trace));
  const int64_t t = blockIdx.x;
  const int v = static_cast<int>(blockIdx.y * blockDim.x + threadIdx.x);
  if (v * kQuantVec < hidden) combine_vector(rows, row_count, hidden, src2dst, weights, top_k, out, t, v);
}

}  // namespace fp8route::kernels

namespace fp8route {

using detail::check_aligned;
using detail::check_contiguous_shape;
using detail::check_device_tensor;
using detail::check_dtype;
using detail::check_ndim;
using detail::check_no_overlap;
using detail::check_same_device;
using detail::given;

namespace {

using quant_launch::pdl_shape;

void check_glue_device() { detail::check_sm90_device("MoE glue kernels"); }

// An int32 [T, top_k] output or input beside `ref` (its T), contiguous.
void check_entries(const TensorView& t, const char* name, DType dtype, int64_t tokens, int64_t top_k) {
  check_device_tensor(t, name);
  check_dtype(t, name, {dtype});
  const int64_t shape[2] = {tokens, top_k};
  check_contiguous_shape(t, name, shape, 2);
}

// The dispatch kernels' ids: int32 [T, top_k], top_k >= 1, contiguous. Returns {T, top_k}.
std::pair<int64_t, int64_t> check_ids(const TensorView& ids) {
  check_device_tensor(ids, "ids");
  check_dtype(ids, "ids", {DType::i32});
  check_ndim(ids, "ids", 2, "[T, top_k]");
  FP8ROUTE_CHECK(ids.is_contiguous(), "ids: must be contiguous, got " << to_string(ids));
  FP8ROUTE_CHECK(ids.size(1) >= 1, "ids: top_k (the last dim) must be >= 1, got " << to_string(ids));
  return {ids.size(0), ids.size(1)};
}

// The dispatch kernels' view of an optional expert_map: its entries and length, or length -1 when
// absent (a given map may be empty, and then its data pointer may be null).
struct ExpertMap {
  const int32_t* data = nullptr;
  int len = -1;
};

// An optional expert_map (int32 [E_global], global -> local id or -1) beside ids, sharing no byte
// with the outputs. Returns the kernels' view of it.
ExpertMap check_expert_map(const TensorView& expert_map, const TensorView& ids,
                           std::initializer_list<std::pair<const TensorView*, const char*>> outputs) {
  if (!given(expert_map)) return {};
  check_device_tensor(expert_map, "expert_map");
  check_dtype(expert_map, "expert_map", {DType::i32});
  check_ndim(expert_map, "expert_map", 1, "[E_global]");
  FP8ROUTE_CHECK(expert_map.is_contiguous() && expert_map.size(0) <= 0x7FFFFFFF,
                 "expert_map: must be contiguous with fewer than 2^31 entries, got " << to_string(expert_map));
  check_same_device(expert_map, "expert_map", ids, "ids");
  for (const auto& [t, name] : outputs) check_no_overlap(*t, name, expert_map, "expert_map");
  return {static_cast<const int32_t*>(expert_map.data), static_cast<int>(expert_map.size(0))};
}

// Calls f.template operator()<CudaType>() for a 16-bit float dtype.
template <class F>
void dispatch_half(DType t, F&& f) {
  if (t == DType::bf16) return f.template operator()<__nv_bfloat16>();
  return f.template operator()<__half>();
}

// The routing kernels' logits [T, E] (min_experts <= E <= kMoeMaxExperts) and outputs weights f32,
// ids int32 [T, top_k] with 1 <= top_k <= min(max_top_k, kMoeMaxTopK) (`why` names max_top_k; "":
// none). Returns T, E, top_k.
struct TopkShape {
  int64_t tokens, experts, top_k;
};

TopkShape check_topk(const TensorView& logits, int64_t min_experts, const TensorView& weights, const TensorView& ids,
                     int64_t max_top_k, const std::string& why) {
  check_device_tensor(logits, "logits");
  check_dtype(logits, "logits", {DType::bf16, DType::f16, DType::f32});
  check_ndim(logits, "logits", 2, "[T, E]");
  FP8ROUTE_CHECK(logits.is_contiguous(), "logits: must be contiguous, got " << to_string(logits));
  const int64_t tokens = logits.size(0), experts = logits.size(1);
  FP8ROUTE_CHECK(experts >= min_experts && experts <= kMoeMaxExperts,
                 "logits: E = " << experts << " experts, expected " << min_experts << " to " << kMoeMaxExperts
                                << " (one token's scores are held in shared memory)");
  check_device_tensor(weights, "weights");
  check_ndim(weights, "weights", 2, "[T, top_k]");
  const int64_t top_k = weights.size(1);
  FP8ROUTE_CHECK(top_k >= 1 && top_k <= std::min(max_top_k, kMoeMaxTopK),
                 "top_k: " << top_k << " (weights' last dim) must be in [1, "
                           << (why.empty() ? std::to_string(kMoeMaxTopK)
                                           : "min(" + why + " = " + std::to_string(max_top_k) + ", " +
                                                 std::to_string(kMoeMaxTopK) + ")")
                           << "]");
  check_entries(weights, "weights", DType::f32, tokens, top_k);
  check_entries(ids, "ids", DType::i32, tokens, top_k);
  FP8ROUTE_CHECK(tokens <= 0x7FFFFFFF, "logits: at most 2^31-1 tokens, got " << tokens);
  check_same_device(weights, "weights", logits, "logits");
  check_same_device(ids, "ids", logits, "logits");
  check_no_overlap(weights, "weights", logits, "logits");
  check_no_overlap(ids, "ids", logits, "logits");
  check_no_overlap(weights, "weights", ids, "ids");
  return {tokens, experts, top_k};
}

// moe_softmax_topk's arguments (top_k up to E).
TopkShape check_softmax_topk(const TensorView& logits, const TensorView& weights, const TensorView& ids) {
  return check_topk(logits, 1, weights, ids, logits.ndim == 2 ? logits.size(1) : 0, "E");
}

// moe_grouped_topk's arguments (check_topk, then the groups, the bias and the scaling factor).
TopkShape check_grouped_topk(const TensorView& logits, const TensorView& bias, int64_t n_group, int64_t topk_group,
                             double scaling_factor, const TensorView& weights, const TensorView& ids) {
  const TopkShape s = check_topk(logits, 2, weights, ids, kMoeMaxTopK, "");
  const int64_t experts = s.experts;
  FP8ROUTE_CHECK(n_group >= 1 && n_group <= kernels::kGroupedTopkMaxGroups && experts % n_group == 0 &&
                     experts / n_group >= 2,
                 "n_group: " << n_group << " must divide E = " << experts
                             << " into groups of at least 2 experts, and be at most " << kernels::kGroupedTopkMaxGroups);
  FP8ROUTE_CHECK(topk_group >= 1 && topk_group <= n_group,
                 "topk_group: " << topk_group << " must be in [1, n_group = " << n_group << "]");
  const int64_t choosable = topk_group * (experts / n_group);
  FP8ROUTE_CHECK(s.top_k <= choosable, "top_k: " << s.top_k << " (weights' last dim) must be at most topk_group x E / "
                                                    "n_group = " << choosable << " (the experts of the kept groups)");
  // The kernels take it as a float: finite there too.
  FP8ROUTE_CHECK(std::isfinite(scaling_factor) && std::fabs(scaling_factor) <= FLT_MAX,
                 "scaling_factor: must be finite as a float, got " << scaling_factor);
  check_device_tensor(bias, "bias");
  check_dtype(bias, "bias", {DType::f32});
  const int64_t bias_shape[1] = {s.experts};
  check_contiguous_shape(bias, "bias", bias_shape, 1);
  check_same_device(bias, "bias", logits, "logits");
  check_no_overlap(weights, "weights", bias, "bias");
  check_no_overlap(ids, "ids", bias, "bias");
  return s;
}

// The masked dispatch's bound, m_max, outputs and map beside ids [T, top_k] (ids' own checks done).
// Returns E (masked_m's length); *map: the kernels' view of expert_map.
int64_t check_masked_dispatch(const TensorView& ids, int64_t tokens, int64_t top_k, const TensorView& expert_map,
                              int64_t m_max, const TensorView& src2dst, const TensorView& masked_m, ExpertMap* map) {
  FP8ROUTE_CHECK(tokens * top_k <= kMoeDispatchMaxEntries,
                 "ids: T * top_k = " << tokens * top_k << " entries, at most " << kMoeDispatchMaxEntries
                                     << " (kMoeDispatchMaxEntries: the masked dispatch kernel is one thread block for "
                                        "decode batches)");
  FP8ROUTE_CHECK(m_max >= 1, "m_max: must be >= 1, got " << m_max);
  FP8ROUTE_CHECK(m_max <= 0x7FFFFFFF, "m_max: must be < 2^31, got " << m_max);
  check_device_tensor(masked_m, "masked_m");
  check_dtype(masked_m, "masked_m", {DType::i32});
  check_ndim(masked_m, "masked_m", 1, "[E]");
  FP8ROUTE_CHECK(masked_m.is_contiguous(), "masked_m: must be contiguous, got " << to_string(masked_m));
  const int64_t experts = masked_m.size(0);
  FP8ROUTE_CHECK(experts * m_max <= 0x7FFFFFFF,
                 "m_max: E * m_max = " << experts << " * " << m_max << " rows must be < 2^31 (src2dst is int32)");
  check_entries(src2dst, "src2dst", DType::i32, tokens, top_k);
  *map = check_expert_map(expert_map, ids, {{&src2dst, "src2dst"}, {&masked_m, "masked_m"}});
  check_same_device(src2dst, "src2dst", ids, "ids");
  check_same_device(masked_m, "masked_m", ids, "ids");
  check_no_overlap(src2dst, "src2dst", ids, "ids");
  check_no_overlap(masked_m, "masked_m", ids, "ids");
  check_no_overlap(src2dst, "src2dst", masked_m, "masked_m");
  return experts;
}

// One warp per token, `floats_per_token` floats of shared memory each.
LaunchShape topk_shape(const TopkShape& s, int64_t floats_per_token) {
  const dim3 grid(static_cast<unsigned>((s.tokens + kernels::kTopkWarps - 1) / kernels::kTopkWarps));
  return pdl_shape(grid, kernels::kTopkWarps * 32,
                   static_cast<size_t>(kernels::kTopkWarps) * static_cast<size_t>(floats_per_token) * 4);
}

// The routing parameters of a checked call (route_warps: 0, set by the fused launch).
kernels::RouteParams route_params(const TensorView& logits, const TensorView& bias, const TopkShape& s,
                                  int64_t n_group, int64_t topk_group, bool renormalize, double scaling_factor,
                                  const TensorView& weights, const TensorView& ids) {
  return {logits.data,
          given(bias) ? static_cast<const float*>(bias.data) : nullptr,
          static_cast<int>(s.tokens),
          static_cast<int>(s.experts),
          static_cast<int>(n_group),
          static_cast<int>(topk_group),
          static_cast<int>(s.top_k),
          renormalize,
          static_cast<float>(scaling_factor),
          0,
          static_cast<float*>(weights.data),
          static_cast<int32_t*>(ids.data)};
}

// One warp per token of the routing kernel (softmax, or sigmoid with r.bias).
void launch_topk(const kernels::RouteParams& r, const TopkShape& s, DType logits_dtype, cudaStream_t stream) {
  const bool sigmoid = r.bias != nullptr;
  quant_launch::dispatch_float(logits_dtype, [&]<class InT>() {
    const auto kernel = sigmoid ? kernels::topk_kernel<InT, true> : kernels::topk_kernel<InT, false>;
    launch_kernel(kernel, topk_shape(s, kernels::route_floats(sigmoid, static_cast<int>(s.experts))), stream, r);
  });
  FP8ROUTE_CHECK_LAUNCH();
}

}  // namespace

void moe_softmax_topk(const TensorView& logits, bool renormalize, const TensorView& weights, const TensorView& ids,
                      cudaStream_t stream) {
  const TopkShape s = check_softmax_topk(logits, weights, ids);
  if (s.tokens == 0) return;
  check_glue_device();
  launch_topk(route_params(logits, {}, s, 1, 1, renormalize, 1.0, weights, ids), s, logits.dtype, stream);
}

void moe_grouped_topk(const TensorView& logits, const TensorView& bias, int64_t n_group, int64_t topk_group,
                      bool renormalize, double scaling_factor, const TensorView& weights, const TensorView& ids,
                      cudaStream_t stream) {
  const TopkShape s = check_grouped_topk(logits, bias, n_group, topk_group, scaling_factor, weights, ids);
  if (s.tokens == 0) return;
  check_glue_device();
  launch_topk(route_params(logits, bias, s, n_group, topk_group, renormalize, scaling_factor, weights, ids), s,
              logits.dtype, stream);
}

void moe_masked_dispatch(const TensorView& ids, const TensorView& expert_map, int64_t m_max,
                         const TensorView& src2dst, const TensorView& masked_m, cudaStream_t stream) {
  const auto [tokens, top_k] = check_ids(ids);
  ExpertMap map;
  const int64_t experts = check_masked_dispatch(ids, tokens, top_k, expert_map, m_max, src2dst, masked_m, &map);
  if (tokens == 0) return;  // masked_m is not written: the caller's zeros stand (moe.h)
  check_glue_device();
  const int64_t work = std::max(tokens * top_k, experts);  // entries, and the counts to zero
  const int threads = static_cast<int>(std::min<int64_t>(kernels::kDispatchThreads, (work + 31) / 32 * 32));
  launch_kernel(kernels::masked_dispatch_kernel, pdl_shape(dim3(1), dim3(threads)), stream,
                static_cast<const int32_t*>(ids.data), static_cast<int>(tokens * top_k), map.data, map.len,
                static_cast<int>(experts), static_cast<int>(m_max),
                static_cast<int32_t*>(src2dst.data), static_cast<int32_t*>(masked_m.data));
  FP8ROUTE_CHECK_LAUNCH();
}

void moe_route_masked_dispatch(const TensorView& logits, const TensorView& bias, int64_t n_group, int64_t topk_group,
                               bool renormalize, double scaling_factor, const TensorView& expert_map, int64_t m_max,
                               const TensorView& weights, const TensorView& ids, const TensorView& src2dst,
                               const TensorView& masked_m, cudaStream_t stream) {
  const bool sigmoid = given(bias);
  TopkShape s;
  if (sigmoid) {
    s = check_grouped_topk(logits, bias, n_group, topk_group, scaling_factor, weights, ids);
  } else {
    s = check_softmax_topk(logits, weights, ids);
    FP8ROUTE_CHECK(n_group == 1 && topk_group == 1 && scaling_factor == 1.0,
                   "n_group, topk_group, scaling_factor: softmax routing (no bias) takes 1, 1, 1.0, got "
                       << n_group << ", " << topk_group << ", " << scaling_factor);
  }
  ExpertMap map;
  const int64_t experts = check_masked_dispatch(ids, s.tokens, s.top_k, expert_map, m_max, src2dst, masked_m, &map);
  for (const auto& [t, name] : {std::pair{&src2dst, "src2dst"}, {&masked_m, "masked_m"}}) {
    check_no_overlap(*t, name, logits, "logits");
    check_no_overlap(*t, name, weights, "weights");
    if (sigmoid) check_no_overlap(*t, name, bias, "bias");
  }
  if (given(expert_map)) {  // the routing writes ids and weights before the dispatch reads the map
    check_no_overlap(ids, "ids", expert_map, "expert_map");
    check_no_overlap(weights, "weights", expert_map, "expert_map");
  }
  if (s.tokens == 0) return;  // masked_m is not written: the caller's zeros stand
  check_glue_device();
  // Routing warps: one per token up to 32, within 32 KB of scratch beside the 16 KB of the dispatch.
  const int64_t per_token = int64_t{kernels::route_floats(sigmoid, static_cast<int>(s.experts))} * 4;  // bytes
  const int warps = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>({s.tokens, 32, 32768 / per_token})));
  kernels::RouteParams r =
      route_params(logits, sigmoid ? bias : TensorView{}, s, n_group, topk_group, renormalize, scaling_factor,
                   weights, ids);
  r.route_warps = warps;
  const LaunchShape shape = pdl_shape(dim3(1), kernels::kDispatchThreads, static_cast<size_t>(warps * per_token));
  FP8ROUTE_TRACE(r.trace = chain_trace::next("route_masked_dispatch", shape.grid, shape.block, shape.smem));
  quant_launch::dispatch_float(logits.dtype, [&]<class InT>() {
    const auto kernel = sigmoid ? kernels::route_masked_dispatch_kernel<InT, true>
                                : kernels::route_masked_dispatch_kernel<InT, false>;
    launch_kernel(kernel, shape, stream, r, map.data, map.len, static_cast<int>(experts), static_cast<int>(m_max),
                  static_cast<int32_t*>(src2dst.data), static_cast<int32_t*>(masked_m.data));
  });
  FP8ROUTE_CHECK_LAUNCH();
}

int64_t moe_contiguous_dispatch_workspace(int64_t entries, int64_t experts) {
  FP8ROUTE_CHECK(entries >= 0 && experts >= 0, "entries, experts: must be >= 0, got " << entries << ", " << experts);
  return (entries + kernels::kContigChunk - 1) / kernels::kContigChunk * experts;
}

void moe_contiguous_dispatch(const TensorView& ids, const TensorView& expert_map, const TensorView& src2dst,
                             const TensorView& offsets, const TensorView& workspace, cudaStream_t stream) {
  const auto [tokens, top_k] = check_ids(ids);
  const int64_t entries = tokens * top_k;
  FP8ROUTE_CHECK(entries <= 0x7FFFFFFF - kernels::kContigChunk,
                 "ids: T * top_k = " << entries << " entries, must be below 2^31 - " << kernels::kContigChunk
                                     << " (src2dst is int32)");
  check_device_tensor(offsets, "offsets");
  check_dtype(offsets, "offsets", {DType::i32});
  check_ndim(offsets, "offsets", 1, "[E + 1]");
  FP8ROUTE_CHECK(offsets.is_contiguous(), "offsets: must be contiguous, got " << to_string(offsets));
  const int64_t experts = offsets.size(0) - 1;
  FP8ROUTE_CHECK(experts >= 1 && experts <= kMoeMaxExperts,
                 "offsets: [E + 1] with 1 <= E <= " << kMoeMaxExperts << " (kMoeMaxExperts), got " << to_string(offsets));
  check_entries(src2dst, "src2dst", DType::i32, tokens, top_k);
  const int64_t need = moe_contiguous_dispatch_workspace(entries, experts);
  check_device_tensor(workspace, "workspace");
  check_dtype(workspace, "workspace", {DType::i32});
  FP8ROUTE_CHECK(workspace.is_contiguous() && workspace.numel() >= need,
                 "workspace: a contiguous int32 tensor of at least moe_contiguous_dispatch_workspace(T * top_k, E) = "
                     << need << " elements, got " << to_string(workspace));
  const ExpertMap map =
      check_expert_map(expert_map, ids, {{&src2dst, "src2dst"}, {&offsets, "offsets"}, {&workspace, "workspace"}});
  const std::pair<const TensorView*, const char*> outs[] = {{&src2dst, "src2dst"}, {&offsets, "offsets"},
                                                            {&workspace, "workspace"}};
  for (const auto& [t, name] : outs) {
    check_same_device(*t, name, ids, "ids");
    check_no_overlap(*t, name, ids, "ids");
  }
  check_no_overlap(src2dst, "src2dst", offsets, "offsets");
  check_no_overlap(src2dst, "src2dst", workspace, "workspace");
  check_no_overlap(offsets, "offsets", workspace, "workspace");
  check_glue_device();
  const int chunks = static_cast<int>((entries + kernels::kContigChunk - 1) / kernels::kContigChunk);
  auto* ws = static_cast<int32_t*>(workspace.data);
  if (chunks > 0)
    launch_kernel(kernels::contiguous_count_kernel, pdl_shape(dim3(chunks), dim3(kernels::kContigWarps * 32)), stream,
                  static_cast<const int32_t*>(ids.data), static_cast<int>(entries), map.data, map.len,
                  static_cast<int>(experts), ws);
  // Also with T = 0: every element of offsets is written (zeros).
  launch_kernel(kernels::contiguous_scan_kernel, pdl_shape(dim3(1), dim3(kernels::kContigScanThreads)), stream,
                chunks, static_cast<int>(experts), ws, static_cast<int32_t*>(offsets.data));
  if (chunks > 0)
    launch_kernel(kernels::contiguous_scatter_kernel, pdl_shape(dim3(chunks), dim3(kernels::kContigWarps * 32)),
                  stream, static_cast<const int32_t*>(ids.data), static_cast<int>(entries), map.data, map.len,
                  static_cast<int>(experts), static_cast<const int32_t*>(ws), static_cast<int32_t*>(src2dst.data));
  FP8ROUTE_CHECK_LAUNCH();
}

void moe_combine(const TensorView& down_rows, const TensorView& src2dst, const TensorView& weights,
                 const TensorView& out, cudaStream_t stream) {
  check_device_tensor(down_rows, "down_rows");
  check_dtype(down_rows, "down_rows", {DType::bf16, DType::f16});
  check_ndim(down_rows, "down_rows", 2, "[R, H]");
  FP8ROUTE_CHECK(down_rows.is_contiguous(), "down_rows: must be contiguous, got " << to_string(down_rows));
  const int64_t hidden = down_rows.size(1);
  FP8ROUTE_CHECK(hidden >= 1 && hidden % kernels::kQuantVec == 0 && hidden <= 0x7FFFFFFF,
                 "down_rows: H = " << hidden << " must be a positive multiple of 8 (16-byte vectors)");
  check_aligned(down_rows.data, 16, "down_rows");
  check_device_tensor(src2dst, "src2dst");
  check_ndim(src2dst, "src2dst", 2, "[T, top_k]");
  const int64_t tokens = src2dst.size(0), top_k = src2dst.size(1);
  FP8ROUTE_CHECK(top_k >= 1, "src2dst: top_k (the last dim) must be >= 1, got " << to_string(src2dst));
  check_entries(src2dst, "src2dst", DType::i32, tokens, top_k);
  check_entries(weights, "weights", DType::f32, tokens, top_k);
  check_device_tensor(out, "out");
  FP8ROUTE_CHECK(out.dtype == DType::f32 || out.dtype == down_rows.dtype,
                 "out: dtype " << dtype_name(out.dtype) << " not allowed (expected f32 or down_rows' "
                               << dtype_name(down_rows.dtype) << ")");
  const int64_t out_shape[2] = {tokens, hidden};
  check_contiguous_shape(out, "out", out_shape, 2);
  check_aligned(out.data, 16, "out");
  FP8ROUTE_CHECK(tokens <= 0x7FFFFFFF, "src2dst: at most 2^31-1 tokens, got " << tokens);
  for (const auto* in : {&src2dst, &weights}) check_same_device(*in, in == &weights ? "weights" : "src2dst", down_rows, "down_rows");
  check_same_device(out, "out", down_rows, "down_rows");
  check_no_overlap(out, "out", down_rows, "down_rows");
  check_no_overlap(out, "out", src2dst, "src2dst");
  check_no_overlap(out, "out", weights, "weights");
  if (tokens == 0) return;
  check_glue_device();
  const int64_t vecs = hidden / kernels::kQuantVec;
  const dim3 grid(static_cast<unsigned>(tokens),
                  static_cast<unsigned>((vecs + kernels::kCombineThreads - 1) / kernels::kCombineThreads));
  const int threads = static_cast<int>(std::min<int64_t>(kernels::kCombineThreads, (vecs + 31) / 32 * 32));
  FP8ROUTE_TRACE(kernels::TraceSlot* const trace = chain_trace::next("combine", grid, dim3(threads), 0));
  dispatch_half(down_rows.dtype, [&]<class RowT>() {
    auto launch = [&]<class OutT>() {
      launch_kernel(kernels::combine_kernel<RowT, OutT>, pdl_shape(grid, dim3(threads)), stream,
                    static_cast<const RowT*>(down_rows.data), down_rows.size(0), static_cast<int>(hidden),
                    static_cast<const int32_t*>(src2dst.data), static_cast<const float*>(weights.data),
                    static_cast<int>(top_k), static_cast<OutT*>(out.data) FP8ROUTE_TRACE(, trace));
    };
    if (out.dtype == DType::f32) launch.template operator()<float>();
    else launch.template operator()<RowT>();
  });
  FP8ROUTE_CHECK_LAUNCH();
}

}  // namespace fp8route
