#pragma once
// Device helpers of every grouped kernel (moe/simt and the SM90 ones): a group's rows from the
// device counts (clamped as include/fp8route/moe.h states), the tile scan that finds the experts
// with rows, and activation block scales in every layout and storage. Portable CUDA.

#include <cstdint>

namespace fp8route::kernels::moe {

// The device counts and how to read them.
struct Groups {
  const int32_t* counts;  // masked_m [E], or offsets [E + 1] / [E] (ends only)
  int experts;
  int rows;  // M_max (masked) or M_total (contiguous)
  bool masked;
  bool offsets_with_start;
};

// Expert e's rows: row0 in the 2-D view of a and out ([E * M_max] or [M_total] rows), count rows;
// its block scale_a rows are t0.. of batch `batch` (masked: the expert's slab; contiguous: one).
struct GroupRows {
  int row0, count, batch, t0;
};

__device__ __forceinline__ GroupRows group_rows(const Groups& g, int e) {
  if (g.masked) {
    const int c = min(max(__ldg(g.counts + e), 0), g.rows);
    return {e * g.rows, c, e, 0};
  }
  int s = g.offsets_with_start ? __ldg(g.counts + e) : (e == 0 ? 0 : __ldg(g.counts + e - 1));
  int end = __ldg(g.counts + e + (g.offsets_with_start ? 1 : 0));
  s = min(max(s, 0), g.rows);
  end = min(max(end, s), g.rows);
  return {s, end - s, 0, s};
}

// prefix[e] = tiles of the experts before e, prefix[E] = all tiles, an expert having
// ceil(count / tile_rows) tiles (tile_rows = INT32_MAX: one tile per expert with rows, so prefix[E]
// counts the active experts). Called by every thread of a block of kThreads; ends with a barrier.
template <int kThreads>
__device__ __forceinline__ void scan_tiles(const Groups& g, int tile_rows, int* prefix) {
  static_assert(kThreads % 32 == 0 && kThreads <= 1024, "whole warps");
  __shared__ int warp_sums[kThreads / 32];
  const auto tiles = [&](int e) {
    const int c = group_rows(g, e).count;
    return c == 0 ? 0 : 1 + (c - 1) / tile_rows;
  };
  const int per = (g.experts + kThreads - 1) / kThreads;
  const int e0 = min(int(threadIdx.x) * per, g.experts), e1 = min(e0 + per, g.experts);
  int sum = 0;
  for (int e = e0; e < e1; ++e) sum += tiles(e);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  int incl = sum;
#pragma unroll
  for (int d = 1; d < 32; d *= 2) {
    const int v = __shfl_up_sync(0xFFFFFFFFu, incl, d);
    if (lane >= d) incl += v;
  }
  if (lane == 31) warp_sums[warp] = incl;
  __syncthreads();
  int before = 0;
  for (int w = 0; w < warp; ++w) before += warp_sums[w];
  int run = before + incl - sum;
  for (int e = e0; e < e1; ++e) {
    prefix[e] = run;
    run += tiles(e);
  }
  if (threadIdx.x == kThreads - 1) prefix[g.experts] = before + incl;
  __syncthreads();
}

// The expert owning tile u (0 <= u < prefix[E]): the largest e with prefix[e] <= u (an empty
// expert shares its successor's prefix, so taking the largest passes it over).
__device__ __forceinline__ int find_expert(const int* prefix, int experts, int u) {
  int lo = 0, hi = experts - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (prefix[mid] <= u) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

// Block scale_a: element (t, c) of batch b at b * se + t * st + c * sc of its storage (f32, or
// int32 words of four UE8M0 bytes, c then counting words).
struct BlockScaleA {
  const void* p;
  int64_t se, st, sc;
  bool packed;
};

// 2^(byte - 127) exactly (byte 0 is the subnormal 2^-127).
__device__ __forceinline__ float ue8m0_to_float(uint32_t byte) {
  return __uint_as_float(byte == 0 ? 0x00400000u : byte << 23);
}

__device__ __forceinline__ float block_sa(const BlockScaleA& s, int batch, int t, int kb) {
  if (s.packed) {
    const int64_t i = int64_t(batch) * s.se + int64_t(t) * s.st + int64_t(kb / 4) * s.sc;
    const uint32_t w = static_cast<uint32_t>(__ldg(static_cast<const int32_t*>(s.p) + i));
    return ue8m0_to_float((w >> (8 * (kb % 4))) & 0xFFu);
  }
  return __ldg(static_cast<const float*>(s.p) + int64_t(batch) * s.se + int64_t(t) * s.st + int64_t(kb) * s.sc);
}

}  // namespace fp8route::kernels::moe
