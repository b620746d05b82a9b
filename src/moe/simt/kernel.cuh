#pragma once
// The portable grouped scaled FP8 GEMM: CUDA cores, fp32 accumulation, any E, M, N, K, every scale
// kind and scale_a layout. Persistent: a grid sized by the SM count walks the tiles
// (expert, n-tile, m-tile) that exist on the device, so an expert without rows owns no tile and its
// weight is never read, and the launch does not depend on the routing (a CUDA graph replays it).
//
// The arithmetic per output is that of the dense GPU kernel of the `reference` backend (gemm/simt/kernel.cuh), in
// the same order: fmaf over each 32-wide K step into a partial sum; at the end of each scale block
// (128 for block scales, all of K otherwise) total = fmaf(partial, sa * sb, total) (block) or
// total += partial (tensor, row); then total * sa * sb (tensor, row). Each expert's rows are
// therefore bit-identical to the dense reference backend run on them alone.

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

namespace fp8route::kernels {

struct GroupedSimtParams {
  const uint8_t* a;   // contiguous: [rows, K]; masked: [E, rows, K]
  const uint8_t* b;   // [E, N, K]
  const void* sa;     // f32, or int32 packed UE8M0 (block, sa_packed)
  const float* sb;
  const int32_t* groups;  // offsets ([E + 1], or [E] ends) or masked_m [E]
  void* out;          // like a, with N columns
  int experts, rows, n, k;  // rows: M_total or M_max
  bool masked;
  bool offsets_with_start;
  int scale_kind;     // 0 tensor, 1 row, 2 block
  bool sa_per_expert; // tensor: sa [E]
  bool sa_packed;     // block: UE8M0 bytes in int32 words
  int64_t sa_stride_e, sa_stride_t, sa_stride_c;  // block; row uses e: rows, t: 1
};

inline constexpr int kGroupedTile = 64;   // outputs per block edge
inline constexpr int kGroupedKStep = 32;  // divides the 128-wide scale blocks
inline constexpr int kGroupedThreads = 256;
// Experts the scheduler's shared-memory scan holds (one int per expert).
inline constexpr int kGroupedMaxExperts = 4096;

__device__ __forceinline__ float grouped_e4m3(uint8_t v) {
  __nv_fp8_e4m3 x;
  x.__x = v;
  return static_cast<float>(x);
}

__device__ __forceinline__ void grouped_store(float v, __nv_bfloat16* p) { *p = __float2bfloat16_rn(v); }
__device__ __forceinline__ void grouped_store(float v, __half* p) { *p = __float2half_rn(v); }

// Expert e's rows: [start, start + count), clamped so that no device value reaches outside a or out
// (include/fp8route/moe.h). Masked: start 0 within the expert's slab.
__device__ __forceinline__ void grouped_range(const GroupedSimtParams& p, int e, int& start, int& count) {
  if (p.masked) {
    start = 0;
    count = min(max(p.groups[e], 0), p.rows);
    return;
  }
  int s = p.offsets_with_start ? p.groups[e] : (e == 0 ? 0 : p.groups[e - 1]);
  int end = p.offsets_with_start ? p.groups[e + 1] : p.groups[e];
  s = min(max(s, 0), p.rows);
  end = min(max(end, s), p.rows);
  start = s;
  count = end - s;
}

// 2^(byte - 127) of the UE8M0 byte, exactly (byte 0 is the subnormal 2^-127).
__device__ __forceinline__ float grouped_ue8m0(uint32_t byte) {
  return __uint_as_float(byte == 0 ? 0x00400000u : byte << 23);
}

// Block scale of activation row t (within batch be) for K block kb.
__device__ __forceinline__ float grouped_block_sa(const GroupedSimtParams& p, int64_t be, int64_t t, int kb) {
  if (p.sa_packed) {
    const int64_t i = be * p.sa_stride_e + t * p.sa_stride_t + int64_t(kb / 4) * p.sa_stride_c;
    const uint32_t w = static_cast<uint32_t>(static_cast<const int32_t*>(p.sa)[i]);
    return grouped_ue8m0((w >> (8 * (kb % 4))) & 0xFFu);
  }
  return static_cast<const float*>(p.sa)[be * p.sa_stride_e + t * p.sa_stride_t + int64_t(kb) * p.sa_stride_c];
}

// ---- tile scheduler: exclusive scan of m-tiles per expert into shared memory -------------------

// prefix[e] = m-tiles of experts before e; prefix[E] = all m-tiles. Each thread scans a run of
// consecutive experts, then the runs' sums are scanned across the block with warp shuffles.
__device__ __forceinline__ void grouped_scan_tiles(const GroupedSimtParams& p, int* prefix) {
  __shared__ int warp_sums[kGroupedThreads / 32];
  const int per = (p.experts + kGroupedThreads - 1) / kGroupedThreads;
  const int e0 = min(int(threadIdx.x) * per, p.experts), e1 = min(e0 + per, p.experts);
  int sum = 0;
  for (int e = e0; e < e1; ++e) {
    int start, count;
    grouped_range(p, e, start, count);
    sum += (count + kGroupedTile - 1) / kGroupedTile;
  }
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  int incl = sum;
  for (int d = 1; d < 32; d *= 2) {
    const int v = __shfl_up_sync(0xFFFFFFFFu, incl, d);
    if (lane >= d) incl += v;
  }
  if (lane == 31) warp_sums[warp] = incl;
  __syncthreads();
  int before = 0;
  for (int w = 0; w < warp; ++w) before += warp_sums[w];
  int run = before + incl - sum;  // exclusive prefix of this thread's first expert
  for (int e = e0; e < e1; ++e) {
    prefix[e] = run;
    int start, count;
    grouped_range(p, e, start, count);
    run += (count + kGroupedTile - 1) / kGroupedTile;
  }
  if (threadIdx.x == kGroupedThreads - 1) prefix[p.experts] = before + incl;
  __syncthreads();
}

// The expert owning m-tile u (0 <= u < prefix[E]): the largest e with prefix[e] <= u. Empty experts
// share their successor's prefix and are passed over by taking the largest.
__device__ __forceinline__ int grouped_find_expert(const int* prefix, int experts, int u) {
  int lo = 0, hi = experts - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (prefix[mid] <= u) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

// ---- the kernel ---------------------------------------------------------------------------------

template <class OutT>
__global__ void __launch_bounds__(kGroupedThreads, 2) grouped_simt_kernel(GroupedSimtParams p) {
  extern __shared__ int prefix[];  // [E + 1]
  __shared__ float as[kGroupedKStep][kGroupedTile + 1];
  __shared__ float bs[kGroupedKStep][kGroupedTile + 1];
  grouped_scan_tiles(p, prefix);

  const int n_tiles = (p.n + kGroupedTile - 1) / kGroupedTile;
  const int64_t total = int64_t(prefix[p.experts]) * n_tiles;
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;  // 16 x 16 threads, 4 x 4 outputs each
  const int kblock = p.scale_kind == 2 ? 128 : p.k;

  for (int64_t t = blockIdx.x; t < total; t += gridDim.x) {
    // Tile t: expert-major; within an expert n-tile major and m-tile fastest, so that blocks running
    // together read the same weight tile.
    const int e = grouped_find_expert(prefix, p.experts, int(t / n_tiles));
    int start, count;
    grouped_range(p, e, start, count);
    const int m_tiles = prefix[e + 1] - prefix[e];
    const int64_t local = t - int64_t(prefix[e]) * n_tiles;
    const int r0 = int(local % m_tiles) * kGroupedTile;
    const int n0 = int(local / m_tiles) * kGroupedTile;

    // Rows of a / out in their 2-D view, and the batch and row of the scales.
    const int64_t row0 = p.masked ? int64_t(e) * p.rows : start;
    const int64_t sa_batch = p.masked ? e : 0;
    const int64_t sa_row0 = p.masked ? 0 : start;
    const uint8_t* a = p.a + row0 * p.k;
    const uint8_t* b = p.b + int64_t(e) * p.n * p.k;

    float total_acc[4][4] = {}, part[4][4] = {};
    for (int k0 = 0; k0 < p.k; k0 += kGroupedKStep) {
      for (int i = threadIdx.x; i < kGroupedKStep * kGroupedTile; i += kGroupedThreads) {
        const int kk = i % kGroupedKStep, c = i / kGroupedKStep;
        const int k = k0 + kk;
        const int r = r0 + c;
        as[kk][c] = (r < count && k < p.k) ? grouped_e4m3(a[int64_t(r) * p.k + k]) : 0.f;
        const int nn = n0 + c;
        bs[kk][c] = (nn < p.n && k < p.k) ? grouped_e4m3(b[int64_t(nn) * p.k + k]) : 0.f;
      }
      __syncthreads();
      for (int kk = 0; kk < kGroupedKStep; ++kk)
        for (int i = 0; i < 4; ++i)
          for (int j = 0; j < 4; ++j) part[i][j] = fmaf(as[kk][ty + 16 * i], bs[kk][tx + 16 * j], part[i][j]);
      __syncthreads();

      const int k_end = k0 + kGroupedKStep;
      if (k_end % kblock == 0 || k_end >= p.k) {  // a scale block ends here
        const int kb = k0 / kblock;
        for (int i = 0; i < 4; ++i) {
          const int r = r0 + ty + 16 * i;
          for (int j = 0; j < 4; ++j) {
            float s = 1.f;
            const int nn = n0 + tx + 16 * j;
            if (p.scale_kind == 2 && r < count && nn < p.n) {
              const int kbs = p.k / 128;
              s = grouped_block_sa(p, sa_batch, sa_row0 + r, kb) *
                  p.sb[(int64_t(e) * ((int64_t(p.n) + 127) / 128) + nn / 128) * kbs + kb];
            }
            total_acc[i][j] = fmaf(part[i][j], s, total_acc[i][j]);
            part[i][j] = 0.f;
          }
        }
      }
    }

    OutT* out = static_cast<OutT*>(p.out) + row0 * p.n;
    const float* sa = static_cast<const float*>(p.sa);
    for (int i = 0; i < 4; ++i) {
      const int r = r0 + ty + 16 * i;
      if (r >= count) continue;
      for (int j = 0; j < 4; ++j) {
        const int nn = n0 + tx + 16 * j;
        if (nn >= p.n) continue;
        float v = total_acc[i][j];
        if (p.scale_kind == 0) {
          v = v * sa[p.sa_per_expert ? e : 0];
          v = v * p.sb[e];
        } else if (p.scale_kind == 1) {
          v = v * sa[sa_batch * p.rows + sa_row0 + r];
          v = v * p.sb[int64_t(e) * p.n + nn];
        }
        grouped_store(v, out + int64_t(r) * p.n + nn);
      }
    }
  }
}

}  // namespace fp8route::kernels
