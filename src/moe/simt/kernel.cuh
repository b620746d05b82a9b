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

#include "moe/groups.cuh"

namespace fp8route::kernels {

struct GroupedSimtParams {
  const uint8_t* a;   // contiguous: [rows, K]; masked: [E, rows, K]
  const uint8_t* b;   // [E, N, K]
  const float* sa;    // tensor, row (block: bsa)
  const float* sb;
  moe::Groups g;      // g.rows: M_total or M_max
  moe::BlockScaleA bsa;
  void* out;          // like a, with N columns
  int n, k;
  int scale_kind;     // 0 tensor, 1 row, 2 block
  bool sa_per_expert; // tensor: sa [E]
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

// ---- the kernel ---------------------------------------------------------------------------------

template <class OutT>
__global__ void __launch_bounds__(kGroupedThreads, 2) grouped_simt_kernel(GroupedSimtParams p) {
  extern __shared__ int prefix[];  // [E + 1]
  __shared__ float as[kGroupedKStep][kGroupedTile + 1];
  __shared__ float bs[kGroupedKStep][kGroupedTile + 1];
  moe::scan_tiles<kGroupedThreads>(p.g, kGroupedTile, prefix);

  const int n_tiles = (p.n + kGroupedTile - 1) / kGroupedTile;
  const int64_t total = int64_t(prefix[p.g.experts]) * n_tiles;
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;  // 16 x 16 threads, 4 x 4 outputs each
  const int kblock = p.scale_kind == 2 ? 128 : p.k;

  for (int64_t t = blockIdx.x; t < total; t += gridDim.x) {
    // Tile t: expert-major; within an expert n-tile major and m-tile fastest, so that blocks running
    // together read the same weight tile.
    const int e = moe::find_expert(prefix, p.g.experts, int(t / n_tiles));
    const moe::GroupRows gr = moe::group_rows(p.g, e);
    const int count = gr.count;
    const int m_tiles = prefix[e + 1] - prefix[e];
    const int64_t local = t - int64_t(prefix[e]) * n_tiles;
    const int r0 = int(local % m_tiles) * kGroupedTile;
    const int n0 = int(local / m_tiles) * kGroupedTile;

    // Rows of a / out in their 2-D view (int64: the simt backend takes any E x M_max).
    const int64_t row0 = p.g.masked ? int64_t(e) * p.g.rows : gr.row0;
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
              s = moe::block_sa(p.bsa, gr.batch, gr.t0 + r, kb) *
                  p.sb[(int64_t(e) * ((int64_t(p.n) + 127) / 128) + nn / 128) * kbs + kb];
            }
            total_acc[i][j] = fmaf(part[i][j], s, total_acc[i][j]);
            part[i][j] = 0.f;
          }
        }
      }
    }

    OutT* out = static_cast<OutT*>(p.out) + row0 * p.n;
    const float* sa = p.sa;
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
          v = v * sa[int64_t(gr.batch) * p.g.rows + gr.t0 + r];
          v = v * p.sb[int64_t(e) * p.n + nn];
        }
        grouped_store(v, out + int64_t(r) * p.n + nn);
      }
    }
  }
}

}  // namespace fp8route::kernels
