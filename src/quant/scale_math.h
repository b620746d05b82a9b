#pragma once
// Correctly rounded divisions of the quantization scales (docs/numerics.md, step 3) without the IEEE
// division sequence, for host and device: the device kernels use them, and the CPU test
// (tests/test_reference_numerics.cpp) checks them against real division for every float in range.

#include <cmath>

#if defined(__CUDACC__)
#define FP8ROUTE_SCALE_FN __host__ __device__ __forceinline__
#else
#define FP8ROUTE_SCALE_FN inline
#endif

namespace fp8route::kernels {

// qmax is 448 (E4M3) or 127 (INT8), the only values code_qmax() gives; RN(1 / qmax) of each is
// folded by the compiler.
FP8ROUTE_SCALE_FN float inv_qmax(float qmax) { return qmax == 448.0f ? 1.0f / 448.0f : 1.0f / 127.0f; }

// a / qmax, correctly rounded, for a in [1e-10, FLT_MAX] and qmax in {448, 127}: the product by
// the rounded reciprocal, then one fma for the remainder and one for the correction. Exact for
// every float of that range (checked exhaustively, both qmax: test_reference_numerics.cpp), and
// three instructions instead of the ~10 (and a slow-path branch) of a general division.
FP8ROUTE_SCALE_FN float div_by_qmax(float a, float qmax) {
  const float inv = inv_qmax(qmax);
#if defined(__CUDA_ARCH__)
  const float q0 = __fmul_rn(a, inv);
  return __fmaf_rn(__fmaf_rn(-q0, qmax, a), inv, q0);
#else
  const float q0 = a * inv;
  return std::fmaf(std::fmaf(-q0, qmax, a), inv, q0);
#endif
}

#if defined(__CUDACC__)
// qmax / a, correctly rounded, for a in [1e-10, FLT_MAX]: the hardware reciprocal refined by one
// Newton step, the quotient, then one fma correction (the fast path of the IEEE division, without
// its range check and slow path). a above 2^64 is scaled by 2^-64 first and the quotient back by
// 2^-64: both exact (powers of two; the quotient stays >= 127 / FLT_MAX, a normal number), and
// the reciprocal never leaves the normal range. Checked against __fdiv_rn for every float of the
// range on the GPU (GroupQuantGpu.ScaleDivisionsExactOverTheWholeRange).
__device__ __forceinline__ float qmax_div(float qmax, float a) {
  const bool big = a > 0x1p64f;
  const float s = big ? 0x1p-64f : 1.0f;
  a = __fmul_rn(a, s);
  float r;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(a));
  r = __fmaf_rn(r, __fmaf_rn(-a, r, 1.0f), r);
  float q = __fmul_rn(qmax, r);
  q = __fmaf_rn(__fmaf_rn(-a, q, qmax), r, q);
  return __fmul_rn(q, s);
}
#endif

}  // namespace fp8route::kernels
