#pragma once
// Host <-> device helpers for the GPU suites.

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "fp8route/buffer.h"
#include "fp8route/reference.h"
#include "fp8route/tensor.h"

namespace fp8route::test {

#define FP8ROUTE_TEST_CUDA(call) ASSERT_EQ((call), cudaSuccess) << #call

inline DeviceBuffer upload(const void* data, size_t bytes) {
  DeviceBuffer b(bytes ? bytes : 16);
  if (bytes) EXPECT_EQ(cudaMemcpy(b.data(), data, bytes, cudaMemcpyHostToDevice), cudaSuccess);
  return b;
}
template <class T>
DeviceBuffer upload(const std::vector<T>& v) { return upload(v.data(), v.size() * sizeof(T)); }

inline std::vector<uint8_t> download(const void* p, size_t bytes) {
  std::vector<uint8_t> v(bytes);
  if (bytes) EXPECT_EQ(cudaMemcpy(v.data(), p, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
  return v;
}

inline void poison(const DeviceBuffer& b, uint8_t byte) {
  EXPECT_EQ(cudaMemset(b.data(), byte, b.bytes()), cudaSuccess);
}

// Host bytes of n elements of a float dtype (f32, f16, bf16), drawn per group of `group` elements
// from N(0, sigma) with sigma log-uniform in [2^lo, 2^hi]: scales of neighbouring groups differ
// by orders of magnitude, as activations do.
inline std::vector<uint8_t> random_activations(DType dtype, int64_t n, std::mt19937_64& rng,
                                               int64_t group = 128, float lo = -8, float hi = 6) {
  std::vector<uint8_t> bytes(static_cast<size_t>(n * dtype_size(dtype)));
  std::uniform_real_distribution<float> mag(lo, hi);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  float sigma = 1;
  for (int64_t i = 0; i < n; ++i) {
    if (i % group == 0) sigma = std::exp2(mag(rng));
    const float v = nd(rng) * sigma;
    if (dtype == DType::f32) std::memcpy(&bytes[i * 4], &v, 4);
    else {
      const uint16_t h = dtype == DType::bf16 ? ref::f32_to_bf16(v) : ref::f32_to_f16(v);
      std::memcpy(&bytes[i * 2], &h, 2);
    }
  }
  return bytes;
}

// E4M3 codes of values spread over the format's range (no NaN), and positive scales in
// [2^-8, 2^-6), as quantization makes them: GEMM operands.
inline std::vector<uint8_t> random_codes(int64_t n, std::mt19937_64& rng) {
  std::vector<uint8_t> v(static_cast<size_t>(n));
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_int_distribution<int> e(-4, 4);
  for (uint8_t& c : v) c = ref::e4m3_encode(std::ldexp(nd(rng), e(rng)) * 8.0f);
  return v;
}
inline std::vector<float> random_scales(int64_t n, std::mt19937_64& rng) {
  std::vector<float> v(static_cast<size_t>(n));
  std::uniform_real_distribution<float> u(1.0f, 4.0f);
  for (float& s : v) s = std::ldexp(u(rng), -8);
  return v;
}

inline void store_value(std::vector<uint8_t>& bytes, DType dtype, int64_t i, float v) {
  if (dtype == DType::f32) std::memcpy(&bytes[i * 4], &v, 4);
  else {
    const uint16_t h = dtype == DType::bf16 ? ref::f32_to_bf16(v) : ref::f32_to_f16(v);
    std::memcpy(&bytes[i * 2], &h, 2);
  }
}

// First difference of two byte images, as an assertion result naming where it is.
inline testing::AssertionResult bytes_equal(const std::vector<uint8_t>& got,
                                            const std::vector<uint8_t>& want, const char* what,
                                            int64_t row_bytes = 0) {
  if (got.size() != want.size())
    return testing::AssertionFailure() << what << ": size " << got.size() << " vs " << want.size();
  int64_t bad = 0, first = -1;
  for (size_t i = 0; i < got.size(); ++i)
    if (got[i] != want[i]) {
      if (first < 0) first = static_cast<int64_t>(i);
      ++bad;
    }
  if (!bad) return testing::AssertionSuccess();
  auto r = testing::AssertionFailure();
  r << what << ": " << bad << " of " << got.size() << " bytes differ; first at byte " << first;
  if (row_bytes) r << " (row " << first / row_bytes << ", col " << first % row_bytes << ")";
  r << ": got 0x" << std::hex << int(got[first]) << ", want 0x" << int(want[first]);
  return r;
}

}  // namespace fp8route::test
