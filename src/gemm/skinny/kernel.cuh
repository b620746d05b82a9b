#pragma once
// The skinny scaled FP8 GEMM kernel: small M (decode, small batches), where the GEMM is bound by
// reading the weight once from HBM. Swap-AB on tensor cores: mma.sync m16n8k32 e4m3 with the
// weight rows as the 16-row operand and up to 8 tokens per 8-column operand, fp32 accumulation.
//
// A block owns kRows weight rows and one K slice (a whole number of 128-wide K blocks; blockIdx.y
// is the split). Its 8 warps are kRowTiles row tiles of 16 rows x kKGroups K groups; a warp walks
// its K blocks (kb = first + kgroup, + kKGroups, ...) and per K block loads 2 rows x 2 x 16 bytes
// per lane straight from HBM (L1 bypassed), kStages K blocks ahead, so that each SM keeps tens of
// KB in flight. The activations of the slice sit in shared memory. Each 128-wide K block's mma
// sum is added to fp32 totals (times sa[kb, m] * sb[n/128, kb] for block scales), as the
// reference kernel does. The K groups are summed in shared memory in a fixed order. With several
// splits (kCluster) the splits of a row range form one thread block cluster: each block leaves its
// sums in its shared memory and, after a cluster barrier, every block finishes a share of the
// outputs by reading its peers' sums through distributed shared memory in split order. With more
// splits than a portable cluster holds, each block writes fp32 partials to global memory and the
// last block of a row range to arrive sums them in split order. Either way: deterministic, no
// float atomics, the same sum.
//
// Latency matters at these sizes (a layer streams in 10-60 us): the first weight loads and the
// epilogue's scale and bias loads are issued before the activations are staged, so the kernel's
// first HBM round trip is shared by all three. Launched with PDL (core/griddep.cuh): with static
// weights the first weight loads are issued before griddepcontrol.wait, overlapping the previous
// kernel's tail; everything the previous kernel may write (a, sa, the split workspace, out) is
// touched after it.
//
// K permutation: a lane loads 16 contiguous bytes of weight rows g and g+8 and of token row g; the
// mma's k order within those bytes is the same for both operands, so the dot products are exact
// whatever order the fragment layout (PTX ISA, mma.m16n8k32 fragments) assigns.

#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "core/chain_trace.cuh"
#include "core/griddep.cuh"

namespace fp8route::kernels {

struct SkinnyParams {
  const uint8_t* a;  // e4m3 [M, K], row stride lda
  const uint8_t* b;  // e4m3 [N, K], row stride ldb
  const float* sa;
  const float* sb;
  const void* bias;  // [N] of OutT, or null
  void* out;         // OutT [M, N], row stride ldo
  float* partial;    // splits > 1: fp32 [splits, M, N]
  int* counters;     // splits > 1: [gridDim.x], zero before and after each launch
  int64_t lda, ldb, ldo;
  int m, n, k;
  int kblocks;        // ceil(K / 128)
  int split_kblocks;  // K blocks per split
  int splits;         // gridDim.y
  int scale_kind;     // 0 tensor, 1 row, 2 block
  bool sa_vector, sb_vector;
  int sa_ld;  // block: align(M, 4)
  bool prefetch_weight;  // b, sb and bias not written by the previous kernel: read before griddep_wait
  FP8ROUTE_TRACE_FIELD
};

inline constexpr int kSkinnyThreads = 256;
inline constexpr int kSkinnyWarps = kSkinnyThreads / 32;
inline constexpr int kSkinnyKBlock = 128;  // the block-scale width; one pipeline step
// Bytes after each activation row in shared memory: rows 64 bytes apart modulo 128 make the
// fragment loads of the 8 lanes of a quarter warp (two rows, 64 bytes each) conflict-free.
inline constexpr int kSkinnyActPad = 64;

template <int kTokenTiles, int kRowTiles, int kStages>
struct SkinnyTraits {
  static constexpr int kMaxM = 8 * kTokenTiles;  // tokens per block: 8 per mma
  static constexpr int kRows = 16 * kRowTiles;   // weight rows per block: 16 per mma
  static constexpr int kKGroups = kSkinnyWarps / kRowTiles;
  // Reduction rows [kKGroups][kMaxM][kRedLd] fp32: +4 spreads the fragment stores over all banks.
  static constexpr int kRedLd = kRows + 4;
  static constexpr int kRedBytes = kKGroups * kMaxM * kRedLd * 4;
  static_assert(kSkinnyWarps % kRowTiles == 0, "the row tiles must divide the warps of a block");
  static_assert(kStages >= 2, "a pipeline needs at least two stages");
};

// 16 bytes of the weight, read once: not kept in L1, and the 256-byte L2 prefetch hint (a warp
// reads whole 128-byte lines of each row per step). Zero when !pred.
__device__ __forceinline__ uint4 skinny_ld_weight(const void* ptr, bool pred) {
  uint4 v;
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, %5, 0;\n"
      " mov.b32 %0, 0;\n mov.b32 %1, 0;\n mov.b32 %2, 0;\n mov.b32 %3, 0;\n"
      " @p ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];\n}\n"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(ptr), "r"(static_cast<int>(pred)));
  return v;
}

// d += A (16x32, rows) * B (32x8, columns), e4m3 inputs, f32 accumulation.
__device__ __forceinline__ void skinny_mma(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                           uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

__device__ __forceinline__ float skinny_to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float skinny_to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ void skinny_store(float v, __nv_bfloat16* p) { *p = __float2bfloat16_rn(v); }
__device__ __forceinline__ void skinny_store(float v, __half* p) { *p = __float2half_rn(v); }

// What an output needs besides its sum: tensor/row scales (block scales were applied per K block)
// and the bias, fetched early (skinny_out_operands) and applied by skinny_finish.
struct SkinnyOut {
  float sa = 1.f, sb = 1.f, bias = 0.f;
};

template <class OutT>
__device__ __forceinline__ SkinnyOut skinny_out_operands(const SkinnyParams& p, int m, int n) {
  SkinnyOut o;
  if (p.scale_kind != 2) {
    o.sa = __ldg(p.sa + (p.sa_vector ? m : 0));
    o.sb = __ldg(p.sb + (p.sb_vector ? n : 0));
  }
  if (p.bias) o.bias = skinny_to_float(static_cast<const OutT*>(p.bias)[n]);
  return o;
}

template <class OutT>
__device__ __forceinline__ void skinny_finish(const SkinnyParams& p, float v, const SkinnyOut& o, int m, int n) {
  if (p.scale_kind != 2) {
    v = v * o.sa;
    v = v * o.sb;
  }
  if (p.bias) v += o.bias;
  skinny_store(v, static_cast<OutT*>(p.out) + int64_t(m) * p.ldo + n);
}

// The splits of one row range in one cluster when they are at most this many (the portable size).
inline constexpr int kSkinnyMaxClusterSplits = 8;

template <class OutT, int kTokenTiles, int kRowTiles, int kStages, bool kCluster>
__global__ void __launch_bounds__(kSkinnyThreads, 2) sm90_fp8_gemm_skinny(SkinnyParams p) {
  using T = SkinnyTraits<kTokenTiles, kRowTiles, kStages>;
  FP8ROUTE_TRACE_SCOPE(p.trace);
  extern __shared__ __align__(16) uint8_t smem[];
  __shared__ bool last_block;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;  // mma fragment coordinates: group, thread in group
  const int rw = warp % kRowTiles, kw = warp / kRowTiles;
  const int row0 = blockIdx.x * T::kRows;
  const int kb0 = blockIdx.y * p.split_kblocks;
  const int kb1 = min(p.kblocks, kb0 + p.split_kblocks);
  const int act_ld = p.split_kblocks * kSkinnyKBlock + kSkinnyActPad;

  // ---- this warp's weight rows; its first kStages - 1 K blocks are requested at once ----
  const int tile_row = row0 + rw * 16;
  const int na = tile_row + g, nb = na + 8;
  const bool ok_a = na < p.n, ok_b = nb < p.n;
  const uint8_t* wa = p.b + int64_t(ok_a ? na : 0) * p.ldb + 16 * t;
  const uint8_t* wb = p.b + int64_t(ok_b ? nb : 0) * p.ldb + 16 * t;
  const int nsteps = tile_row < p.n ? (kb1 - kb0 - kw + T::kKGroups - 1) / T::kKGroups : 0;
  const float* sb_row = p.sb + int64_t(tile_row / kSkinnyKBlock) * p.kblocks;  // block scales

  // Step s covers K block kb0 + kw + s * kKGroups: bytes [16t, 16t + 16) and [64 + 16t, ...).
  auto load = [&](uint4(&w)[4], int s) {
    const int k = (kb0 + kw + s * T::kKGroups) * kSkinnyKBlock;
#pragma unroll
    for (int u = 0; u < 2; ++u) {
      const bool in = s < nsteps && k + u * 64 + 16 * t < p.k;
      w[2 * u] = skinny_ld_weight(wa + k + u * 64, in && ok_a);
      w[2 * u + 1] = skinny_ld_weight(wb + k + u * 64, in && ok_b);
    }
  };
  uint4 w[kStages][4];
  if (!p.prefetch_weight) griddep_wait();
  FP8ROUTE_TRACE(if (!p.prefetch_weight) trace_release(p.trace));
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) load(w[s], s);
  if (p.prefetch_weight) griddep_wait();
  FP8ROUTE_TRACE(if (p.prefetch_weight) trace_release(p.trace));

  // The outputs this block finishes: i = m * rows + r, from `first` in steps of `step` (with a
  // cluster, rank c takes i % splits == c). The first one's scales and bias are fetched now.
  const int rows = min(T::kRows, p.n - row0);
  const int outputs = p.m * rows;
  const int first = kCluster ? threadIdx.x * p.splits + blockIdx.y : threadIdx.x;
  const int step = kCluster ? kSkinnyThreads * p.splits : kSkinnyThreads;
  SkinnyOut out0;
  if ((kCluster || p.splits == 1) && first < outputs) out0 = skinny_out_operands<OutT>(p, first / rows, row0 + first % rows);

  // ---- the activations of this K slice to shared memory (zero past K) ----
  {
    const int units = (kb1 - kb0) * (kSkinnyKBlock / 16);
    const int k0 = kb0 * kSkinnyKBlock;
    for (int i = threadIdx.x; i < p.m * units; i += kSkinnyThreads) {
      const int m = i / units, k = k0 + i % units * 16;
      uint4 v = make_uint4(0, 0, 0, 0);
      if (k < p.k) v = __ldg(reinterpret_cast<const uint4*>(p.a + m * p.lda + k));
      *reinterpret_cast<uint4*>(smem + m * act_ld + (k - k0)) = v;
    }
  }
  __syncthreads();

  // ---- main loop: this warp's K blocks of its 16 rows ----
  float acc[kTokenTiles][4] = {};
  // One token tile at a time: its 128-product sum is added to the fp32 totals at once (times
  // sa[kb, m] * sb[n/128, kb] for block scales), so only 4 partial registers are live.
  auto compute = [&](const uint4(&wk)[4], int s) {
    const int kb = kb0 + kw + s * T::kKGroups;
    const float sbv = p.scale_kind == 2 ? __ldg(sb_row + kb) : 1.f;
#pragma unroll
    for (int mt = 0; mt < kTokenTiles; ++mt) {
      float part[4] = {};
      const int m = mt * 8 + g;
      const uint8_t* xs = smem + m * act_ld + (kb - kb0) * kSkinnyKBlock + 16 * t;
#pragma unroll
      for (int u = 0; u < 2; ++u) {
        uint4 x = make_uint4(0, 0, 0, 0);  // tokens past M: zero columns, never stored
        if (m < p.m) x = *reinterpret_cast<const uint4*>(xs + u * 64);
        const uint4 ra = wk[2 * u], rb = wk[2 * u + 1];
        skinny_mma(part, ra.x, rb.x, ra.y, rb.y, x.x, x.y);
        skinny_mma(part, ra.z, rb.z, ra.w, rb.w, x.z, x.w);
      }
      if (p.scale_kind == 2) {
#pragma unroll
        for (int j = 0; j < 2; ++j) {  // C fragment: columns (tokens) 2t, 2t + 1; rows g, g + 8
          const int mc = mt * 8 + 2 * t + j;
          const float sc = mc < p.m ? __ldg(p.sa + int64_t(kb) * p.sa_ld + mc) * sbv : 0.f;
          acc[mt][j] = fmaf(part[j], sc, acc[mt][j]);
          acc[mt][j + 2] = fmaf(part[j + 2], sc, acc[mt][j + 2]);
        }
      } else {
#pragma unroll
        for (int i = 0; i < 4; ++i) acc[mt][i] += part[i];
      }
    }
  };
  for (int s0 = 0; s0 < nsteps; s0 += kStages) {
#pragma unroll
    for (int s = 0; s < kStages; ++s) {
      if (s0 + s >= nsteps) break;
      load(w[(s + kStages - 1) % kStages], s0 + s + kStages - 1);
      compute(w[s], s0 + s);
    }
  }

  // ---- sum the K groups in shared memory (fixed order), then finish or hand on the partials ----
  griddep_launch_dependents();  // the weight stream is done: the next kernel may start its prologue
  __syncthreads();  // the activations are no longer read: the space holds the reduction
  float* red = reinterpret_cast<float*>(smem);
#pragma unroll
  for (int mt = 0; mt < kTokenTiles; ++mt)
#pragma unroll
    for (int i = 0; i < 4; ++i)
      red[(kw * T::kMaxM + mt * 8 + 2 * t + (i & 1)) * T::kRedLd + rw * 16 + g + 8 * (i >> 1)] = acc[mt][i];
  __syncthreads();

  auto group_sum = [&](int m, int r) {  // this block's sum for output (m, r): its K groups in order
    float v = red[m * T::kRedLd + r];
#pragma unroll
    for (int q = 1; q < T::kKGroups; ++q) v += red[(q * T::kMaxM + m) * T::kRedLd + r];
    return v;
  };
  auto out_operands = [&](int i, int m, int r) {
    return i == first ? out0 : skinny_out_operands<OutT>(p, m, row0 + r);
  };

  if constexpr (kCluster) {
    // This block's sums in place of K group 0 (each (m, r) is read and written by one thread), then
    // its share of the outputs from all the splits' sums, in split order.
    for (int i = threadIdx.x; i < outputs; i += kSkinnyThreads) red[i / rows * T::kRedLd + i % rows] = group_sum(i / rows, i % rows);
    cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
    cluster.sync();
    for (int i = first; i < outputs; i += step) {
      const int m = i / rows, r = i % rows;
      float* mine = red + m * T::kRedLd + r;
      float v = *cluster.map_shared_rank(mine, 0);
      for (int s = 1; s < p.splits; ++s) v += *cluster.map_shared_rank(mine, s);
      skinny_finish<OutT>(p, v, out_operands(i, m, r), m, row0 + r);
    }
    cluster.sync();  // no block leaves while a peer may still read its sums
  } else {
    for (int i = threadIdx.x; i < outputs; i += kSkinnyThreads) {
      const int m = i / rows, r = i % rows;
      const float v = group_sum(m, r);
      if (p.splits == 1) skinny_finish<OutT>(p, v, out_operands(i, m, r), m, row0 + r);
      else p.partial[(int64_t(blockIdx.y) * p.m + m) * p.n + row0 + r] = v;
    }
    if (p.splits == 1) return;

    // The last block of this row range to arrive sums the splits' partials in split order
    // (the fence-then-count pattern of the CUDA programming guide's threadfence example).
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) last_block = atomicAdd(p.counters + blockIdx.x, 1) == p.splits - 1;
    __syncthreads();
    if (!last_block) return;
    __threadfence();
    for (int i = threadIdx.x; i < outputs; i += kSkinnyThreads) {
      const int m = i / rows, n = row0 + i % rows;
      float v = __ldcg(p.partial + int64_t(m) * p.n + n);
      for (int s = 1; s < p.splits; ++s) v += __ldcg(p.partial + (int64_t(s) * p.m + m) * p.n + n);
      skinny_finish<OutT>(p, v, skinny_out_operands<OutT>(p, m, n), m, n);
    }
    if (threadIdx.x == 0) p.counters[blockIdx.x] = 0;  // ready for the next launch on this stream
  }
}

}  // namespace fp8route::kernels
