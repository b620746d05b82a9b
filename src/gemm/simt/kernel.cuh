#pragma once
// The scaled FP8 GEMM kernel of the "reference" backend: CUDA cores, fp32 accumulation, any shape and alignment.
// Simple on purpose: it is the answer of last resort and the GPU reference of the tests, so it
// favours obviousness over speed (byte loads, no tensor cores).
//
// y[m, n] = sum over K blocks of (sum_k a[m, k] * b[n, k]) * scale, where for tensor and row
// scales there is one block spanning K and the scales multiply the whole sum, and for block
// scales each 128-wide K block is scaled by sa[kb, m] * sb[n / 128, kb] before it is added.

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

namespace fp8route::kernels {

struct SimtParams {
  const uint8_t* a;  // [M, K], row stride lda
  const uint8_t* b;  // [N, K], row stride ldb
  const float* sa;
  const float* sb;
  const void* bias;  // [N] of OutT (f32 output: bias type given by bias_is_bf16/f16), or null
  void* out;         // [rows, N], row stride ldo
  const int32_t* rows;  // output row r is y row rows[r]; null: row r
  int64_t lda, ldb, ldo;
  int m, n, k, num_rows;
  int scale_kind;     // 0 tensor, 1 row, 2 block
  bool sa_vector, sb_vector;
  int sa_ld;          // block: align(M, 4)
  int sb_ld;          // block: row stride of sb, ceil(K/128) or (padded form) align(ceil(K/128), 4)
  int bias_dtype;     // 0 none, 1 bf16, 2 f16
};

inline constexpr int kSimtTile = 64;   // outputs per block edge
inline constexpr int kSimtKStep = 32;  // divides the 128-wide scale blocks
inline constexpr int kSimtThreads = 256;

__device__ __forceinline__ float ref_e4m3_to_float(uint8_t v) {
  __nv_fp8_e4m3 x;
  x.__x = v;
  return static_cast<float>(x);
}

__device__ __forceinline__ void ref_store(float v, float* p) { *p = v; }
__device__ __forceinline__ void ref_store(float v, __nv_bfloat16* p) { *p = __float2bfloat16_rn(v); }
__device__ __forceinline__ void ref_store(float v, __half* p) { *p = __float2half_rn(v); }

template <class OutT>
__global__ void __launch_bounds__(kSimtThreads) fp8_gemm_simt(SimtParams p) {
  __shared__ float as[kSimtKStep][kSimtTile + 1];
  __shared__ float bs[kSimtKStep][kSimtTile + 1];
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;  // 16 x 16 threads, 4 x 4 outputs each
  const int r0 = blockIdx.y * kSimtTile, n0 = blockIdx.x * kSimtTile;

  int row_of[4];  // y rows of this thread's outputs (-1: past the end)
  for (int i = 0; i < 4; ++i) {
    const int r = r0 + ty + 16 * i;
    row_of[i] = r < p.num_rows ? (p.rows ? p.rows[r] : r) : -1;
  }
  float total[4][4] = {}, part[4][4] = {};
  const int kblock = p.scale_kind == 2 ? 128 : p.k;  // the width one scale product covers

  for (int k0 = 0; k0 < p.k; k0 += kSimtKStep) {
    for (int i = threadIdx.x; i < kSimtKStep * kSimtTile; i += kSimtThreads) {
      const int kk = i % kSimtKStep, t = i / kSimtKStep;
      const int k = k0 + kk;
      const int ra = r0 + t;
      const int ya = ra < p.num_rows ? (p.rows ? p.rows[ra] : ra) : -1;
      as[kk][t] = (ya >= 0 && k < p.k) ? ref_e4m3_to_float(p.a[ya * p.lda + k]) : 0.f;
      const int nb = n0 + t;
      bs[kk][t] = (nb < p.n && k < p.k) ? ref_e4m3_to_float(p.b[nb * p.ldb + k]) : 0.f;
    }
    __syncthreads();
    for (int kk = 0; kk < kSimtKStep; ++kk)
      for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 4; ++j) part[i][j] = fmaf(as[kk][ty + 16 * i], bs[kk][tx + 16 * j], part[i][j]);
    __syncthreads();

    const int k_end = k0 + kSimtKStep;
    if (k_end % kblock == 0 || k_end >= p.k) {  // a scale block ends here
      const int kb = k0 / kblock;
      for (int i = 0; i < 4; ++i) {
        for (int j = 0; j < 4; ++j) {
          float s = 1.f;
          if (p.scale_kind == 2 && row_of[i] >= 0 && n0 + tx + 16 * j < p.n) {
            const int n = n0 + tx + 16 * j;
            s = p.sa[int64_t(kb) * p.sa_ld + row_of[i]] *
                p.sb[int64_t(n / 128) * p.sb_ld + kb];
          }
          total[i][j] = fmaf(part[i][j], s, total[i][j]);
          part[i][j] = 0.f;
        }
      }
    }
  }

  for (int i = 0; i < 4; ++i) {
    const int r = r0 + ty + 16 * i;
    if (row_of[i] < 0) continue;
    for (int j = 0; j < 4; ++j) {
      const int n = n0 + tx + 16 * j;
      if (n >= p.n) continue;
      float v = total[i][j];
      if (p.scale_kind != 2) {
        v = v * p.sa[p.sa_vector ? row_of[i] : 0];
        v = v * p.sb[p.sb_vector ? n : 0];
      }
      if (p.bias_dtype == 1) v += __bfloat162float(static_cast<const __nv_bfloat16*>(p.bias)[n]);
      if (p.bias_dtype == 2) v += __half2float(static_cast<const __half*>(p.bias)[n]);
      ref_store(v, static_cast<OutT*>(p.out) + int64_t(r) * p.ldo + n);
    }
  }
}

}  // namespace fp8route::kernels
