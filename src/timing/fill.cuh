#pragma once
// Device-side random operands for GEMM tests and benchmarks: generated where they are used (a
// 1.7 GB weight is not worth a trip through the host), from a counter-based hash so a seed
// repeats a run exactly. The kernels are static: each unit that includes this has its own copy
// (the library's gemm_operands.cu and test_gemm.cu are linked into one binary).

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

namespace fp8route::timing {

__device__ inline uint64_t mix64(uint64_t x) {  // splitmix64
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
__device__ inline float unit_at(uint64_t seed, int64_t i) {  // uniform in [-1, 1)
  return static_cast<float>(static_cast<int64_t>(mix64(seed ^ mix64(i)) >> 40) - (1 << 23)) / (1 << 23);
}

#define FP8ROUTE_GRID_STRIDE(i, n) \
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < (n); i += int64_t(gridDim.x) * blockDim.x)

// Codes of a [rows, cols] matrix with row stride ld. exact: integers in [-2, 2] (sums exact in
// fp32 even under FP8 fast accumulation); otherwise values spread over the E4M3 range (uniform
// times a random power of two in [2^-4, 2^4], times 8).
static __global__ void fill_codes(uint8_t* p, int64_t rows, int64_t cols, int64_t ld, uint64_t seed, bool exact) {
  FP8ROUTE_GRID_STRIDE(i, rows * cols) {
    float v;
    if (exact) {
      v = static_cast<float>(static_cast<int>(mix64(seed ^ mix64(i)) % 5) - 2);
    } else {
      const int e = static_cast<int>(mix64(seed ^ mix64(i) ^ 0x5555) % 9) - 4;
      v = ldexpf(unit_at(seed, i), e) * 8.f;
    }
    p[(i / cols) * ld + i % cols] = __nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3);
  }
}

// Positive scales: exact: powers of two in {1/2, 1, 2}; otherwise in [2^-8, 2^-6) (as quant makes).
static __global__ void fill_scales(float* p, int64_t n, uint64_t seed, bool exact) {
  FP8ROUTE_GRID_STRIDE(i, n) {
    p[i] = exact ? ldexpf(1.f, static_cast<int>(mix64(seed ^ mix64(i)) % 3) - 1)
                 : ldexpf(1.5f + 0.5f * unit_at(seed, i), -7);
  }
}

template <class T>
__device__ T from_float(float v);
template <>
__device__ inline __nv_bfloat16 from_float(float v) { return __float2bfloat16_rn(v); }
template <>
__device__ inline __half from_float(float v) { return __float2half_rn(v); }

// A 16-bit bias: exact: integers in [-8, 8]; otherwise uniform in [-4, 4).
template <class T>
__global__ void fill_bias(T* p, int64_t n, uint64_t seed, bool exact) {
  FP8ROUTE_GRID_STRIDE(i, n) {
    p[i] = from_float<T>(exact ? static_cast<float>(static_cast<int>(mix64(seed ^ mix64(i)) % 17) - 8)
                               : 4.f * unit_at(seed, i));
  }
}

inline constexpr int kFillGrid = 1024, kFillBlock = 256;

}  // namespace fp8route::timing
