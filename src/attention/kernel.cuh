#pragma once
// Device code of the fused decode attention (include/fp8route/attention.h; arithmetic in
// docs/numerics.md, "Decode attention"). Launcher: src/attention/attention.cu.
//
// Grid: x = the splits of one sequence's cached positions (one thread block cluster), y = kv head x
// chunk of its query heads, z = sequence. A block:
//  1. prologue: the G query heads of its chunk (and, in cluster rank 0, the new key) are normalized
//     per head (optional) and rotated, rounded to the input dtype, and kept in shared memory;
//  2. main loop over its split of positions lo .. p - 1 read from the cache: a group of D / 8 lanes
//     holds one position's 8-element slices of K and V (16-byte loads), so a warp covers 32 / (D / 8)
//     positions per step; each lane keeps an online softmax state (max, sum, 8 output columns) per
//     query head;
//  3. merges: the lanes of one warp, the warps of the block (through shared memory; rank 0 adds the
//     new position's own key and value), then the blocks of the cluster in rank order (reading
//     peers' shared memory), so the result does not depend on timing; between the last two, rank 0
//     of chunk 0 writes the new key and value to the cache.
// Softmax runs in base 2 on scores pre-multiplied by scale * log2(e).

#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "core/chain_trace.cuh"
#include "core/griddep.cuh"
#include "quant/norm_kernel.cuh"

namespace fp8route::kernels {

struct DecodeAttnParams {
  const void* qkv;
  int64_t qkv_stride;
  void* k_cache;
  void* v_cache;
  int64_t kc_sb, kc_sh, kc_sp;  // strides in elements: sequence, head, position
  int64_t vc_sb, vc_sh, vc_sp;
  const void* cos;  // [R, D]
  const void* sin;
  const int32_t* positions;
  const void* q_norm;  // null: no per-head norm
  const void* k_norm;
  void* out;
  int64_t out_stride;
  int32_t hq, hk, group, chunks;  // group = hq / hk query heads per kv head, in `chunks` blocks
  int32_t seq;                    // S, positions in the cache
  int32_t window;                 // 0: none
  bool cache_ready;               // positions and the cached rows are read before griddepcontrol.wait
  float eps;
  float scale_log2;               // softmax scale * log2(e)
  FP8ROUTE_TRACE_FIELD
};

constexpr int kAttnWarps = 8;
constexpr int kAttnThreads = kAttnWarps * 32;
constexpr int kAttnMaxSplits = 8;  // blocks of one cluster (the portable cluster size)

template <int D, int G>
struct AttnSmem {
  // In floats.
  static constexpr int kQ = 0;                             // [G][D] rotated queries
  static constexpr int kKn = kQ + G * D;                   // [D] the new key
  static constexpr int kVn = kKn + D;                      // [D] the new value
  static constexpr int kSn = kVn + D;                      // [G] the new key's scores
  static constexpr int kWo = kSn + G;                      // [W][G][D] warps' outputs
  static constexpr int kWm = kWo + kAttnWarps * G * D;     // [W][G] warps' maxima
  static constexpr int kWl = kWm + kAttnWarps * G;         // [W][G] warps' sums
  static constexpr int kCo = kWl + kAttnWarps * G;         // [G][D] the block's output (peers read it)
  static constexpr int kCm = kCo + G * D;                  // [G]
  static constexpr int kCl = kCm + G;                      // [G]
  static constexpr int kFloats = kCl + G;
  static constexpr int kBytes = kFloats * 4;
};

__device__ __forceinline__ void prefetch_l2(const void* p) {
  asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
}

// The factor that rescales a softmax state (sum and output) kept at maximum m to the maximum mnew
// >= m when states over disjoint positions merge; m is a base-2 score maximum, -inf for a state
// with no position yet (factor 0, where exp2(-inf - -inf) would be NaN).
__device__ __forceinline__ float merge_weight(float m, float mnew) {
  return m == -INFINITY ? 0.0f : exp2f(m - mnew);
}

// Per-head RMSNorm (optional) and rotation of one head of D values at src, by a whole warp; the
// results, rounded to T, go to dst[D] in shared memory. Lane l holds elements l*E .. l*E+E-1 of each
// half (E = D / 64), so a rotation pair (i, i + D/2) sits in one lane.
template <class T, int D>
__device__ __forceinline__ void norm_rotate_head(const T* src, const T* norm_w, const T* cos_row, const T* sin_row,
                                                 float eps, float* dst, int lane) {
  constexpr int E = D / 64;
  float x1[E], x2[E];
#pragma unroll
  for (int t = 0; t < E; ++t) {
    const int i = lane * E + t;
    x1[t] = static_cast<float>(src[i]);
    x2[t] = static_cast<float>(src[i + D / 2]);
  }
  if (norm_w) {
    double ss = 0.0;
#pragma unroll
    for (int t = 0; t < E; ++t) ss += static_cast<double>(x1[t]) * x1[t] + static_cast<double>(x2[t]) * x2[t];
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, off);
    const float inv = __double2float_rn(1.0 / sqrt(ss / D + static_cast<double>(eps)));
#pragma unroll
    for (int t = 0; t < E; ++t) {
      const int i = lane * E + t;
      x1[t] = round_to<T>(__fmul_rn(round_to<T>(__fmul_rn(x1[t], inv)), static_cast<float>(norm_w[i])));
      x2[t] = round_to<T>(__fmul_rn(round_to<T>(__fmul_rn(x2[t], inv)), static_cast<float>(norm_w[i + D / 2])));
    }
  }
#pragma unroll
  for (int t = 0; t < E; ++t) {
    const int i = lane * E + t;
    const float c1 = static_cast<float>(cos_row[i]), s1 = static_cast<float>(sin_row[i]);
    const float c2 = static_cast<float>(cos_row[i + D / 2]), s2 = static_cast<float>(sin_row[i + D / 2]);
    dst[i] = round_to<T>(__fadd_rn(__fmul_rn(x1[t], c1), __fmul_rn(-x2[t], s1)));
    dst[i + D / 2] = round_to<T>(__fadd_rn(__fmul_rn(x2[t], c2), __fmul_rn(x1[t], s2)));
  }
}

// kDeep (G = 1 only): 8 positions per lane per iteration instead of 4, twice the loads in flight for
// twice the registers (the launcher takes it only where the launch still runs in one wave).
template <class T, int D, int G, bool kDeep = false>
__global__ void __launch_bounds__(kAttnThreads, 1) decode_attention_kernel(const DecodeAttnParams p) {
  static_assert(D == 64 || D == 128 || D == 256, "head dims 64, 128, 256");
  constexpr int kLanesPerRow = D / kQuantVec;  // lanes holding one position's K (or V) row
  constexpr int kRowsPerStep = 32 / kLanesPerRow;
  static_assert(!kDeep || G == 1, "the deep loop is built for one query head per block");
  constexpr int kSteps = G >= 8 ? 2 : (kDeep ? 8 : 4);  // positions per lane per iteration (loads in flight)
  using Smem = AttnSmem<D, G>;
  FP8ROUTE_TRACE_SCOPE(p.trace);
  // Dependents may launch at once: each waits (griddepcontrol.wait) for this grid's completion and
  // memory flush before it reads out or the cache, and reads before its wait only what no kernel of
  // the step writes (weights). Every block of this grid is resident when the trigger takes effect
  // (it needs all of them), so dependents never take an SM one of this grid's blocks waits for.
  griddep_launch_dependents();
  extern __shared__ __align__(16) float smem[];
  namespace cg = cooperative_groups;
  const cg::cluster_group cluster = cg::this_cluster();
  const int rank = static_cast<int>(cluster.block_rank());
  const int splits = static_cast<int>(cluster.num_blocks());

  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int b = blockIdx.z;
  const int kvh = blockIdx.y / p.chunks, chunk = blockIdx.y % p.chunks;
  const int qh0 = kvh * p.group + chunk * G;
  const int ng = min(G, p.group - chunk * G);
  T* out = static_cast<T*>(p.out) + b * p.out_stride + static_cast<int64_t>(qh0) * D;

  // qkv comes from the previous kernel. With cache_ready the positions and the cached rows do not
  // (the caller's promise), so their first loads are issued before the wait.
  if (!p.cache_ready) griddep_wait();
  FP8ROUTE_TRACE(if (!p.cache_ready) trace_release(p.trace));
  const int pos = p.positions[b];
  if (pos < 0 || pos >= p.seq) {  // the same branch in every block of the cluster
    griddep_wait();  // out may still be read by an earlier kernel
    if (rank == 0)
      for (int i = tid; i < ng * D; i += kAttnThreads) out[i] = static_cast<T>(NAN);
    return;
  }
  const int lo = p.window > 0 ? max(0, pos - p.window + 1) : 0;
  const int per = (pos - lo + splits - 1) / splits;  // cached positions lo .. pos - 1, split evenly
  const int begin = min(pos, lo + rank * per);
  const int end = min(pos, begin + per);

  const int64_t kbase = b * p.kc_sb + kvh * p.kc_sh, vbase = b * p.vc_sb + kvh * p.vc_sh;
  const T* kc = static_cast<const T*>(p.k_cache) + kbase;
  const T* vc = static_cast<const T*>(p.v_cache) + vbase;
  const int sub = lane / kLanesPerRow;
  const int e0 = (lane % kLanesPerRow) * kQuantVec;
  constexpr int kRowsPerIter = kSteps * kRowsPerStep;
  // Rows of the iteration at r0 into registers; zeros past `end` (a masked row's weight is 0, and
  // 0 * stale NaN bits would poison the sums).
  auto load_rows = [&](int r0, Raw8<T> (&kr)[kSteps], Raw8<T> (&vr)[kSteps]) {
#pragma unroll
    for (int i = 0; i < kSteps; ++i) {
      const int r = r0 + i * kRowsPerStep + sub;
      kr[i] = r < end ? load_raw8(kc + r * p.kc_sp + e0) : Raw8<T>{};
      vr[i] = r < end ? load_raw8(vc + r * p.vc_sp + e0) : Raw8<T>{};
    }
  };
  // Software pipelined: the next iteration's loads are issued before this one's arithmetic, and
  // the first iteration's before the prologue (the cached rows do not depend on it).
  Raw8<T> kr[kSteps], vr[kSteps];
  load_rows(begin + warp * kRowsPerIter, kr, vr);
  if (p.cache_ready) {
    // The second iteration's rows into L2 while the previous kernel finishes (each lane its own, as
    // load_rows would): the main loop's first look-ahead loads then hit L2. Only one iteration
    // ahead: a prefetch of the whole split adds L2 traffic that slows large batches, where the rows
    // do not stay in L2 until they are read.
#pragma unroll
    for (int i = 0; i < kSteps; ++i) {
      const int r = begin + warp * kRowsPerIter + kAttnWarps * kRowsPerIter + i * kRowsPerStep + sub;
      if (r < end) {
        prefetch_l2(kc + r * p.kc_sp + e0);
        prefetch_l2(vc + r * p.vc_sp + e0);
      }
    }
    griddep_wait();
  }
  FP8ROUTE_TRACE(if (p.cache_ready) trace_release(p.trace));

  // 1. Prologue.
  const T* row = static_cast<const T*>(p.qkv) + b * p.qkv_stride;
  const T* cos_row = static_cast<const T*>(p.cos) + static_cast<int64_t>(pos) * D;
  const T* sin_row = static_cast<const T*>(p.sin) + static_cast<int64_t>(pos) * D;
  const bool owner = rank == 0;  // rank 0's state includes the new position
  const int heads = ng + (owner ? 1 : 0);
  for (int h = warp; h < heads; h += kAttnWarps) {
    if (h < ng)
      norm_rotate_head<T, D>(row + static_cast<int64_t>(qh0 + h) * D, static_cast<const T*>(p.q_norm), cos_row,
                             sin_row, p.eps, smem + Smem::kQ + h * D, lane);
    else
      norm_rotate_head<T, D>(row + static_cast<int64_t>(p.hq + kvh) * D, static_cast<const T*>(p.k_norm), cos_row,
                             sin_row, p.eps, smem + Smem::kKn, lane);
  }
  const T* vsrc = row + static_cast<int64_t>(p.hq + p.hk + kvh) * D;
  if (owner)
    for (int i = tid; i < D; i += kAttnThreads) smem[Smem::kVn + i] = static_cast<float>(vsrc[i]);
  __syncthreads();
  if (owner) {
    for (int h = warp; h < ng; h += kAttnWarps) {
      float s = 0.0f;
      for (int i = lane; i < D; i += 32) s = fmaf(smem[Smem::kQ + h * D + i], smem[Smem::kKn + i], s);
#pragma unroll
      for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
      if (lane == 0) smem[Smem::kSn + h] = s * p.scale_log2;
    }
  }

  // 2. Main loop.
  float q[G][kQuantVec], o[G][kQuantVec], m[G], l[G];
#pragma unroll
  for (int j = 0; j < G; ++j) {
#pragma unroll
    for (int t = 0; t < kQuantVec; ++t) {
      q[j][t] = j < ng ? smem[Smem::kQ + j * D + e0 + t] * p.scale_log2 : 0.0f;
      o[j][t] = 0.0f;
    }
    m[j] = -INFINITY;
    l[j] = 0.0f;
  }
  for (int r0 = begin + warp * kRowsPerIter; r0 < end; r0 += kAttnWarps * kRowsPerIter) {
    Raw8<T> kn[kSteps], vn[kSteps];
    load_rows(r0 + kAttnWarps * kRowsPerIter, kn, vn);
    float s[kSteps][G];
#pragma unroll
    for (int i = 0; i < kSteps; ++i) {
      float k[kQuantVec];
      to_float8(kr[i], k);
#pragma unroll
      for (int j = 0; j < G; ++j) {
        float acc = 0.0f;
#pragma unroll
        for (int t = 0; t < kQuantVec; ++t) acc = fmaf(q[j][t], k[t], acc);
#pragma unroll
        for (int off = kLanesPerRow / 2; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
        s[i][j] = r0 + i * kRowsPerStep + sub < end ? acc : -INFINITY;
      }
    }
#pragma unroll
    for (int j = 0; j < G; ++j) {
      float mx = m[j];
#pragma unroll
      for (int i = 0; i < kSteps; ++i) mx = fmaxf(mx, s[i][j]);
      if (mx == -INFINITY) continue;
      const float corr = merge_weight(m[j], mx);
      l[j] *= corr;
#pragma unroll
      for (int t = 0; t < kQuantVec; ++t) o[j][t] *= corr;
      m[j] = mx;
    }
#pragma unroll
    for (int i = 0; i < kSteps; ++i) {
      float v[kQuantVec];
      to_float8(vr[i], v);
#pragma unroll
      for (int j = 0; j < G; ++j) {
        const float pr = s[i][j] == -INFINITY ? 0.0f : exp2f(s[i][j] - m[j]);
        l[j] += pr;
#pragma unroll
        for (int t = 0; t < kQuantVec; ++t) o[j][t] = fmaf(pr, v[t], o[j][t]);
      }
    }
#pragma unroll
    for (int i = 0; i < kSteps; ++i) kr[i] = kn[i], vr[i] = vn[i];
  }

  // 3. Merges: the rows of a warp (lanes kLanesPerRow apart hold the same columns)...
#pragma unroll
  for (int off = kLanesPerRow; off < 32; off <<= 1) {
#pragma unroll
    for (int j = 0; j < G; ++j) {
      const float m2 = __shfl_xor_sync(0xffffffffu, m[j], off);
      const float l2 = __shfl_xor_sync(0xffffffffu, l[j], off);
      const float mx = fmaxf(m[j], m2);
      const float a = merge_weight(m[j], mx), c = merge_weight(m2, mx);
      l[j] = l[j] * a + l2 * c;
#pragma unroll
      for (int t = 0; t < kQuantVec; ++t) o[j][t] = o[j][t] * a + __shfl_xor_sync(0xffffffffu, o[j][t], off) * c;
      m[j] = mx;
    }
  }
  if (sub == 0) {
#pragma unroll
    for (int j = 0; j < G; ++j) {
#pragma unroll
      for (int t = 0; t < kQuantVec; ++t) smem[Smem::kWo + (warp * G + j) * D + e0 + t] = o[j][t];
      if (lane == 0) smem[Smem::kWm + warp * G + j] = m[j], smem[Smem::kWl + warp * G + j] = l[j];
    }
  }
  __syncthreads();
  // ... the warps of the block, in warp order (and the new position, in rank 0) ...
  for (int i = tid; i < ng * D; i += kAttnThreads) {
    const int j = i / D;
    float mx = owner ? smem[Smem::kSn + j] : -INFINITY;
    for (int w = 0; w < kAttnWarps; ++w) mx = fmaxf(mx, smem[Smem::kWm + w * G + j]);
    float lsum = 0.0f, acc = 0.0f;
    for (int w = 0; w < kAttnWarps; ++w) {
      const float c = merge_weight(smem[Smem::kWm + w * G + j], mx);
      lsum += smem[Smem::kWl + w * G + j] * c;
      acc += smem[Smem::kWo + (w * G + j) * D + i % D] * c;
    }
    if (owner) {
      const float c = merge_weight(smem[Smem::kSn + j], mx);
      lsum += c;
      acc += smem[Smem::kVn + i % D] * c;
    }
    smem[Smem::kCo + i] = acc;
    if (i % D == 0) smem[Smem::kCm + j] = mx, smem[Smem::kCl + j] = lsum;
  }
  cluster.sync();
  // The new key (rounded, so exact in T) and value into the cache, once per kv head. Written only
  // now: the cluster barrier's release would otherwise wait for these stores to complete.
  if (owner && chunk == 0)
    for (int i = tid; i < D; i += kAttnThreads) {
      static_cast<T*>(p.k_cache)[kbase + pos * p.kc_sp + i] = static_cast<T>(smem[Smem::kKn + i]);
      static_cast<T*>(p.v_cache)[vbase + pos * p.vc_sp + i] = static_cast<T>(smem[Smem::kVn + i]);
    }
  // ... and the blocks of the cluster, in rank order: each block finishes a share of the outputs.
  const int share = (ng * D + splits - 1) / splits;
  const int stop = min(ng * D, (rank + 1) * share);
  for (int i = rank * share + tid; i < stop; i += kAttnThreads) {
    const int j = i / D;
    // Every peer's state read first (the reads' latencies overlap), then merged in rank order.
    float cm[kAttnMaxSplits], cl[kAttnMaxSplits], co[kAttnMaxSplits];
#pragma unroll
    for (int r = 0; r < kAttnMaxSplits; ++r) {
      if (r < splits) {
        cm[r] = *cluster.map_shared_rank(smem + Smem::kCm + j, r);
        cl[r] = *cluster.map_shared_rank(smem + Smem::kCl + j, r);
        co[r] = *cluster.map_shared_rank(smem + Smem::kCo + i, r);
      }
    }
    float mx = -INFINITY;
#pragma unroll
    for (int r = 0; r < kAttnMaxSplits; ++r)
      if (r < splits) mx = fmaxf(mx, cm[r]);
    float lsum = 0.0f, acc = 0.0f;
#pragma unroll
    for (int r = 0; r < kAttnMaxSplits; ++r) {
      if (r < splits) {
        const float c = merge_weight(cm[r], mx);
        lsum += cl[r] * c;
        acc += co[r] * c;
      }
    }
    out[i] = static_cast<T>(acc / lsum);
  }
  // Peers may still read this block's shared memory: no block leaves before every block has read.
  // A relaxed arrive: the reads are complete (their values are used above), and a release would
  // wait for this block's output stores.
  asm volatile("barrier.cluster.arrive.relaxed.aligned;\n" ::: "memory");
  asm volatile("barrier.cluster.wait.aligned;\n" ::: "memory");
}

}  // namespace fp8route::kernels
