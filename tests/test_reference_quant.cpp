// The CPU group-quant reference: every format and layout, padding, and the traps of docs/numerics.md.

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <set>
#include <vector>

#include "fp8route/reference.h"
#include "test_util.h"

namespace fp8route {
namespace {

std::vector<uint16_t> random_bf16(int64_t n, std::mt19937_64& rng, float scale = 1.0f) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<uint16_t> v(n);
  for (auto& x : v) x = ref::f32_to_bf16(d(rng));
  return v;
}

float scale_at(const ref::QuantOutput& q, const GroupQuantSpec& s, int64_t t, int64_t g) {
  const QuantLayout& L = q.layout;
  if (s.storage == ScaleStorage::f32) {
    float f;
    std::memcpy(&f, &q.scales[(t * L.scale_stride_t + g * L.scale_stride_c) * 4], 4);
    return f;
  }
  const int64_t word = t * L.scale_stride_t + (g / 4) * L.scale_stride_c;
  return ref::ue8m0_to_f32(q.scales[word * 4 + g % 4]);
}

struct Case {
  int group;
  DType code;
  ScaleRounding rounding;
  ScaleStorage storage;
  ScaleLayout layout;
};

std::vector<Case> all_cases() {
  std::vector<Case> cs;
  for (int g : kGroupSizes)
    for (DType c : {DType::e4m3, DType::i8})
      for (auto r : {ScaleRounding::none, ScaleRounding::pow2})
        for (auto st : {ScaleStorage::f32, ScaleStorage::ue8m0_packed})
          for (auto l : {ScaleLayout::row_major, ScaleLayout::col_major, ScaleLayout::col_major_tma}) {
            if (st == ScaleStorage::ue8m0_packed && r != ScaleRounding::pow2) continue;
            cs.push_back({g, c, r, st, l});
          }
  return cs;
}

TEST(RefGroupQuant, DequantizesCloseAndPaddingIsZero) {
  auto rng = test::make_rng(1);
  for (const Case& c : all_cases()) {
    const GroupQuantSpec s{c.group, c.code, c.rounding, c.storage, c.layout};
    for (int64_t T : {1, 3, 5}) {
      const int64_t H = c.group * 5;  // 5 groups: not a multiple of 4
      auto x = random_bf16(T * H, rng, 3.0f);
      auto q = ref::per_token_group_quant(x.data(), DType::bf16, T, H, H, s);
      std::vector<char> addressed(q.scales.size(), 0);
      for (int64_t t = 0; t < T; ++t)
        for (int64_t g = 0; g < 5; ++g) {
          const float sc = scale_at(q, s, t, g);
          ASSERT_TRUE(std::isfinite(sc) && sc > 0) << to_string(s);
          float amax = 0;
          for (int i = 0; i < c.group; ++i)
            amax = std::fmax(amax, std::fabs(ref::bf16_to_f32(x[t * H + g * c.group + i])));
          const float qmax = code_qmax(c.code);
          // s >= amax / qmax, and for pow2 s < 2 * amax / qmax.
          EXPECT_GE(sc, amax / qmax * (1 - 1e-6f));
          if (c.rounding == ScaleRounding::pow2) EXPECT_LT(sc, 2 * amax / qmax);
          for (int i = 0; i < c.group; ++i) {
            const int64_t idx = t * H + g * c.group + i;
            const float xv = ref::bf16_to_f32(x[idx]);
            const float deq = c.code == DType::e4m3
                                  ? ref::e4m3_decode(q.codes[idx]) * sc
                                  : static_cast<int8_t>(q.codes[idx]) * sc;
            // Rounding error: half a step of the code grid at that magnitude.
            const float tol = c.code == DType::e4m3 ? std::fabs(xv) / 16 + sc * 0x1p-9f : sc / 2;
            ASSERT_LE(std::fabs(deq - xv), tol * 1.0001f) << to_string(s) << " t=" << t << " i=" << i;
          }
          if (c.storage == ScaleStorage::f32) {
            const int64_t e = t * q.layout.scale_stride_t + g * q.layout.scale_stride_c;
            for (int b = 0; b < 4; ++b) addressed[e * 4 + b] = 1;
          } else {
            addressed[(t * q.layout.scale_stride_t + (g / 4) * q.layout.scale_stride_c) * 4 + g % 4] = 1;
          }
        }
      for (size_t i = 0; i < q.scales.size(); ++i)
        if (!addressed[i]) ASSERT_EQ(q.scales[i], 0) << "padding byte " << i << " " << to_string(s) << " T=" << T;
    }
  }
}

TEST(RefGroupQuant, NaNAndInfStayInTheirGroup) {
  const GroupQuantSpec s{128, DType::e4m3, ScaleRounding::none, ScaleStorage::f32, ScaleLayout::row_major};
  auto rng = test::make_rng(2);
  const int64_t T = 2, H = 512;
  auto x = random_bf16(T * H, rng);
  auto clean = ref::per_token_group_quant(x.data(), DType::bf16, T, H, H, s);
  x[5] = ref::f32_to_bf16(std::nanf(""));   // group 0 of row 0
  x[130] = ref::f32_to_bf16(INFINITY);      // group 1 of row 0
  x[H + 300] = ref::f32_to_bf16(-INFINITY); // group 2 of row 1
  auto dirty = ref::per_token_group_quant(x.data(), DType::bf16, T, H, H, s);
  EXPECT_EQ(dirty.codes[5], 0);
  EXPECT_EQ(dirty.codes[130], 0x7E);
  EXPECT_EQ(dirty.codes[H + 300], 0xFE);
  // The amax is over finite elements, so every other code of those groups and of all other groups
  // is unchanged (the non-finite elements were not part of clean's amax only if they did not set
  // it; compare everything except the poisoned positions and their groups' scales).
  for (int64_t i = 0; i < T * H; ++i) {
    if (i == 5 || i == 130 || i == H + 300) continue;
    const int64_t g = (i % H) / 128, t = i / H;
    const bool touched = (t == 0 && (g == 0 || g == 1)) || (t == 1 && g == 2);
    if (!touched) ASSERT_EQ(dirty.codes[i], clean.codes[i]) << i;
  }
  for (int64_t t = 0; t < T; ++t)
    for (int64_t g = 0; g < 4; ++g) {
      const float sc = scale_at(dirty, s, t, g);
      EXPECT_TRUE(std::isfinite(sc)) << t << "," << g;
    }
}

TEST(RefGroupQuant, AllZeroRowAndTinyF16Group) {
  const GroupQuantSpec s{128, DType::e4m3, ScaleRounding::none, ScaleStorage::f32, ScaleLayout::row_major};
  std::vector<uint16_t> x(256, 0);
  // Row: group 0 all zero; group 1 tiny f16 values (amax 4e-3 < 448 / 65504).
  std::mt19937_64 rng(3);
  std::uniform_real_distribution<float> u(-4e-3f, 4e-3f);
  for (int i = 128; i < 256; ++i) x[i] = ref::f32_to_f16(u(rng));
  auto q = ref::per_token_group_quant(x.data(), DType::f16, 1, 256, 256, s);
  for (int i = 0; i < 128; ++i) EXPECT_EQ(q.codes[i], 0);
  EXPECT_EQ(scale_at(q, s, 0, 0), kAmaxFloor / 448.0f);
  // A multiplier overflowing f16 would turn the group into +-448; in fp32 every code dequantizes
  // to within half an E4M3 step of its input.
  const float sc = scale_at(q, s, 0, 1);
  EXPECT_LT(sc, 1e-5f);
  for (int i = 128; i < 256; ++i) {
    const float xv = ref::f16_to_f32(x[i]);
    EXPECT_NEAR(ref::e4m3_decode(q.codes[i]) * sc, xv, std::fabs(xv) / 16 + sc * 0x1p-9f) << i;
  }
}

TEST(RefGroupQuant, StridedRowsAndF32Input) {
  const GroupQuantSpec s{32, DType::i8, ScaleRounding::pow2, ScaleStorage::ue8m0_packed, ScaleLayout::col_major};
  std::vector<float> x(3 * 100);
  std::mt19937_64 rng(4);
  std::normal_distribution<float> d;
  for (auto& v : x) v = d(rng);
  auto strided = ref::per_token_group_quant(x.data(), DType::f32, 3, 64, 100, s);
  std::vector<float> packed;
  for (int t = 0; t < 3; ++t) packed.insert(packed.end(), x.begin() + t * 100, x.begin() + t * 100 + 64);
  auto dense = ref::per_token_group_quant(packed.data(), DType::f32, 3, 64, 64, s);
  EXPECT_EQ(strided.codes, dense.codes);
  EXPECT_EQ(strided.scales, dense.scales);
}

}  // namespace
}  // namespace fp8route
