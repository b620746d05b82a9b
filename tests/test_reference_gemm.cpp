// The fp64 GEMM reference: known answers for each scale kind, exact small-integer products, bias,
// output rounding, and argument checks.

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "fp8route/error.h"
#include "fp8route/reference.h"
#include "test_util.h"

namespace fp8route {
namespace {

std::vector<uint8_t> encode_all(const std::vector<float>& v) {
  std::vector<uint8_t> c(v.size());
  for (size_t i = 0; i < v.size(); ++i) c[i] = ref::e4m3_encode(v[i]);
  return c;
}

// Small integers in [-8, 8] are exact in E4M3, and sums of K <= 1024 such products are exact.
std::vector<float> small_ints(int64_t n, std::mt19937_64& rng) {
  std::uniform_int_distribution<int> d(-8, 8);
  std::vector<float> v(n);
  for (auto& x : v) x = static_cast<float>(d(rng));
  return v;
}

TEST(RefGemm, TensorScalesSmallIntegersExact) {
  auto rng = test::make_rng(10);
  const int64_t M = 5, N = 7, K = 300;
  auto af = small_ints(M * K, rng), bf = small_ints(N * K, rng);
  std::vector<float> sa{0.5f}, sb{4.0f};
  auto y = ref::scaled_mm(encode_all(af), encode_all(bf), M, N, K, ScaleKind::tensor, sa, sb, {},
                          DType::f32);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      long long acc = 0;
      for (int64_t k = 0; k < K; ++k) acc += static_cast<long long>(af[i * K + k]) * bf[j * K + k];
      EXPECT_EQ(y[i * N + j], static_cast<float>(acc * 2)) << i << "," << j;
    }
}

TEST(RefGemm, RowScalesAndBias) {
  auto rng = test::make_rng(11);
  const int64_t M = 3, N = 4, K = 16;
  auto af = small_ints(M * K, rng), bf = small_ints(N * K, rng);
  std::vector<float> sa{1, 2, 4}, sb{0.5f, 1, 2, 8}, bias{1, -1, 0.25f, 100};
  auto y = ref::scaled_mm(encode_all(af), encode_all(bf), M, N, K, ScaleKind::row, sa, sb, bias,
                          DType::f32);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double acc = 0;
      for (int64_t k = 0; k < K; ++k) acc += af[i * K + k] * bf[j * K + k];
      EXPECT_EQ(y[i * N + j], static_cast<float>(acc * sa[i] * sb[j] + bias[j]));
    }
  // Scalar forms broadcast.
  auto ys = ref::scaled_mm(encode_all(af), encode_all(bf), M, N, K, ScaleKind::row,
                           std::vector<float>{2}, std::vector<float>{3}, {}, DType::f32);
  auto yt = ref::scaled_mm(encode_all(af), encode_all(bf), M, N, K, ScaleKind::tensor,
                           std::vector<float>{2}, std::vector<float>{3}, {}, DType::f32);
  EXPECT_EQ(ys, yt);
}

TEST(RefGemm, BlockScalesApplyPerKBlockAndNBlock) {
  // K = 256 (two K blocks), N = 130 (two N blocks), M = 3 (sa padded to 4 rows).
  const int64_t M = 3, N = 130, K = 256;
  std::vector<float> af(M * K, 1.0f), bf(N * K, 1.0f);
  std::vector<float> sa(2 * 4, 0.0f), sb(2 * 2, 0.0f);
  for (int64_t i = 0; i < M; ++i) {
    sa[0 * 4 + i] = 1.0f * (i + 1);
    sa[1 * 4 + i] = 10.0f * (i + 1);
  }
  sb = {1.0f, 2.0f,   // n block 0: k block 0, 1
        3.0f, 4.0f};  // n block 1
  auto y = ref::scaled_mm(encode_all(af), encode_all(bf), M, N, K, ScaleKind::block, sa, sb, {},
                          DType::f32);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      const int nb = j / 128;
      const double want = 128.0 * (i + 1) * sb[nb * 2 + 0] + 128.0 * 10 * (i + 1) * sb[nb * 2 + 1];
      EXPECT_EQ(y[i * N + j], static_cast<float>(want)) << i << "," << j;
    }
}

TEST(RefGemm, PartialLastKBlock) {
  const int64_t M = 1, N = 1, K = 130;
  std::vector<float> af(K, 2.0f), bf(K, 1.0f);
  std::vector<float> sa{1, 0, 0, 0, 5, 0, 0, 0}, sb{1, 1};
  auto y = ref::scaled_mm(encode_all(af), encode_all(bf), M, N, K, ScaleKind::block, sa, sb, {},
                          DType::f32);
  EXPECT_EQ(y[0], 128 * 2.0f + 2 * 2.0f * 5);
}

TEST(RefGemm, OutputRoundsOnceToNearestEven) {
  // acc = 256*256 + 16*16 + 2^-9*2^-9 = 65536 * (1 + 2^-8) + 2^-18: just above the bf16 tie between
  // 65536 and 66048. Rounding the fp64 value directly gives 66048; rounding it to fp32 first loses
  // the 2^-18 (a tie there too) and would give 65536.
  const std::vector<float> a{256.0f, 16.0f, 0x1p-9f}, b{256.0f, 16.0f, 0x1p-9f};
  auto y = ref::scaled_mm(encode_all(a), encode_all(b), 1, 1, 3, ScaleKind::tensor,
                          std::vector<float>{1}, std::vector<float>{1}, {}, DType::bf16);
  EXPECT_EQ(y[0], 66048.0f);
  // f16: 1 + 2^-8 + 2^-18 rounds to 1 + 2^-8 (10 mantissa bits).
  const std::vector<float> a2{1.0f, 0x1p-8f, 0x1p-9f}, b2{1.0f, 1.0f, 0x1p-9f};
  auto yh = ref::scaled_mm(encode_all(a2), encode_all(b2), 1, 1, 3, ScaleKind::tensor,
                           std::vector<float>{1}, std::vector<float>{1}, {}, DType::f16);
  EXPECT_EQ(yh, std::vector<float>{1.0f + 0x1p-8f});
}

TEST(RefGemm, ShapeErrorsNameTheArgument) {
  std::vector<uint8_t> a(6), b(9);
  std::vector<float> one{1};
  EXPECT_THROW(ref::scaled_mm(a, b, 2, 2, 4, ScaleKind::tensor, one, one, {}, DType::bf16), Error);
  try {
    ref::scaled_mm(a, b, 2, 3, 3, ScaleKind::row, std::vector<float>{1, 2, 3}, one, {}, DType::bf16);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("sa"), std::string::npos) << e.what();
  }
  EXPECT_THROW(ref::scaled_mm(a, b, 2, 3, 3, ScaleKind::tensor, one, one, {}, DType::e4m3), Error);
}

}  // namespace
}  // namespace fp8route
