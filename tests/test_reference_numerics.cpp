// The scalar formats of the CPU reference against independent formulations (docs/numerics.md).

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "quant/scale_math.h"
#include "fp8route/quant_layout.h"
#include "fp8route/reference.h"

namespace fp8route {
namespace {

// ---- an independent E4M3 encoder: nearest of the 127 positive finite values, by search --------

struct E4M3Table {
  double value[127];  // value of positive code c, c in [0, 0x7E]
  E4M3Table() {
    for (int c = 0; c <= 0x7E; ++c) {
      const int exp_field = c >> 3, man = c & 7;
      value[c] = exp_field == 0 ? man * std::pow(2.0, -9)
                                : (8 + man) * std::pow(2.0, exp_field - 7 - 3);
    }
  }
};
const E4M3Table kTable;

uint8_t e4m3_by_search(float v) {
  if (std::isnan(v)) return 0x7F;
  const uint8_t sign = std::signbit(v) ? 0x80 : 0;
  const double a = std::fabs(static_cast<double>(v));
  if (a >= 464.0) return sign | 0x7E;  // satfinite, +-inf included
  int best = 0;
  double best_d = std::numeric_limits<double>::infinity();
  for (int c = 0; c <= 0x7E; ++c) {
    const double d = std::fabs(kTable.value[c] - a);
    // Codes are ordered by value, so "even code" is "even last mantissa bit": ties to even.
    if (d < best_d || (d == best_d && (c & 1) == 0)) {
      best = c;
      best_d = d;
    }
  }
  return sign | static_cast<uint8_t>(best);
}

TEST(E4M3, EveryBf16ValueMatchesSearch) {
  int checked = 0;
  for (uint32_t h = 0; h < 65536; ++h) {
    const float v = ref::bf16_to_f32(static_cast<uint16_t>(h));
    ASSERT_EQ(ref::e4m3_encode(v), e4m3_by_search(v)) << "bf16 bits 0x" << std::hex << h << " = " << v;
    ++checked;
  }
  EXPECT_EQ(checked, 65536);
}

TEST(E4M3, EveryF16ValueMatchesSearch) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float v = ref::f16_to_f32(static_cast<uint16_t>(h));
    ASSERT_EQ(ref::e4m3_encode(v), e4m3_by_search(v)) << "f16 bits 0x" << std::hex << h << " = " << v;
  }
}

TEST(E4M3, WorkedTiesFromNumerics) {
  EXPECT_EQ(ref::e4m3_encode(168.0f), 0x72);  // tie between 160 and 176 -> even (160)
  EXPECT_EQ(ref::e4m3_decode(0x72), 160.0f);
  EXPECT_EQ(ref::e4m3_encode(168.0000153f), 0x73);  // just above the tie -> 176
  EXPECT_EQ(ref::e4m3_decode(0x73), 176.0f);
  EXPECT_EQ(ref::e4m3_encode(-168.0f), 0xF2);
  EXPECT_EQ(ref::e4m3_encode(1.0625f), 0x38);  // 1 + 1/16: tie between 1 and 1.125 -> 1
  EXPECT_EQ(ref::e4m3_encode(1.1875f), 0x3A);  // tie between 1.125 and 1.25 -> 1.25 (even)
}

TEST(E4M3, SubnormalsZeroAndSigns) {
  EXPECT_EQ(ref::e4m3_encode(0x1p-9f), 0x01);
  EXPECT_EQ(ref::e4m3_encode(0x1p-10f), 0x00);       // tie between 0 and 2^-9 -> 0
  EXPECT_EQ(ref::e4m3_encode(3 * 0x1p-10f), 0x02);   // tie between 1 and 2 quanta -> 2
  EXPECT_EQ(ref::e4m3_encode(7.5f * 0x1p-9f), 0x08); // rounds up into the smallest normal
  EXPECT_EQ(ref::e4m3_encode(0x1p-6f), 0x08);
  EXPECT_EQ(ref::e4m3_encode(1e-30f), 0x00);
  EXPECT_EQ(ref::e4m3_encode(-1e-30f), 0x80);  // sign of zero kept
  EXPECT_EQ(ref::e4m3_encode(0.0f), 0x00);
  EXPECT_EQ(ref::e4m3_encode(-0.0f), 0x80);
  EXPECT_EQ(ref::e4m3_decode(0x01), 0x1p-9f);
  EXPECT_TRUE(std::signbit(ref::e4m3_decode(0x80)));
}

TEST(E4M3, SaturationNaNAndInfinity) {
  EXPECT_EQ(ref::e4m3_encode(448.0f), 0x7E);
  EXPECT_EQ(ref::e4m3_encode(463.99997f), 0x7E);
  EXPECT_EQ(ref::e4m3_encode(464.0f), 0x7E);
  EXPECT_EQ(ref::e4m3_encode(464.00003f), 0x7E);
  EXPECT_EQ(ref::e4m3_encode(480.0f), 0x7E);
  EXPECT_EQ(ref::e4m3_encode(1e30f), 0x7E);
  EXPECT_EQ(ref::e4m3_encode(-1e30f), 0xFE);
  EXPECT_EQ(ref::e4m3_encode(INFINITY), 0x7E);
  EXPECT_EQ(ref::e4m3_encode(-INFINITY), 0xFE);
  EXPECT_EQ(ref::e4m3_encode(std::nanf("")), 0x7F);
  EXPECT_EQ(ref::e4m3_encode(432.0f), 0x7E);  // tie between 416 and 448 -> 448 (even)
  EXPECT_EQ(ref::e4m3_encode(431.9f), 0x7D);
  EXPECT_TRUE(std::isnan(ref::e4m3_decode(0x7F)));
  EXPECT_TRUE(std::isnan(ref::e4m3_decode(0xFF)));
}

TEST(E4M3, DecodeEncodeRoundTripsEveryCode) {
  for (int c = 0; c < 256; ++c) {
    if ((c & 0x7F) == 0x7F) continue;
    EXPECT_EQ(ref::e4m3_encode(ref::e4m3_decode(static_cast<uint8_t>(c))), c) << c;
  }
}

TEST(E4M3, RandomFloatsMatchSearch) {
  std::mt19937 rng(12345);
  std::uniform_real_distribution<float> mag(-12.0f, 10.0f);
  for (int i = 0; i < 200000; ++i) {
    const float v = std::ldexp(1.0f + (rng() & 0xFFFFFF) * 0x1p-24f, static_cast<int>(mag(rng))) *
                    ((rng() & 1) ? -1.0f : 1.0f);
    ASSERT_EQ(ref::e4m3_encode(v), e4m3_by_search(v)) << v;
  }
}

TEST(Int8, RoundingAndSaturation) {
  EXPECT_EQ(ref::i8_encode(2.5f), 2);
  EXPECT_EQ(ref::i8_encode(3.5f), 4);
  EXPECT_EQ(ref::i8_encode(-2.5f), -2);
  EXPECT_EQ(ref::i8_encode(126.5f), 126);
  EXPECT_EQ(ref::i8_encode(127.4f), 127);
  EXPECT_EQ(ref::i8_encode(1000.0f), 127);
  EXPECT_EQ(ref::i8_encode(-1000.0f), -127);  // symmetric: never -128
  EXPECT_EQ(ref::i8_encode(INFINITY), 127);
  EXPECT_EQ(ref::i8_encode(-INFINITY), -127);
  EXPECT_EQ(ref::i8_encode(std::nanf("")), 0);
}

TEST(HalfFloats, RoundTripEveryPattern) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = ref::f16_to_f32(static_cast<uint16_t>(h));
    const float b = ref::bf16_to_f32(static_cast<uint16_t>(h));
    if (!std::isnan(f)) ASSERT_EQ(ref::f32_to_f16(f), h) << std::hex << h;
    if (!std::isnan(b)) ASSERT_EQ(ref::f32_to_bf16(b), h) << std::hex << h;
  }
}

TEST(HalfFloats, NarrowingRoundsToNearestEven) {
  EXPECT_EQ(ref::f32_to_bf16(1.0f + 0x1p-8f), 0x3F80);  // tie -> even (1.0)
  EXPECT_EQ(ref::f32_to_bf16(1.0f + 3 * 0x1p-8f), 0x3F82);
  EXPECT_EQ(ref::f32_to_f16(1.0f + 0x1p-11f), 0x3C00);
  EXPECT_EQ(ref::f32_to_f16(65504.0f), 0x7BFF);
  EXPECT_EQ(ref::f32_to_f16(65519.0f), 0x7BFF);
  EXPECT_EQ(ref::f32_to_f16(65520.0f), 0x7C00);
  EXPECT_EQ(ref::f32_to_f16(0x1p-25f), 0x0000);  // tie between 0 and the smallest subnormal
  EXPECT_EQ(ref::f32_to_f16(0x1.8p-24f), 0x0002);
}

// ---- UE8M0 ----------------------------------------------------------------------------------

TEST(UE8M0, AtAndJustAroundPowersOfTwo) {
  for (int k = -126; k <= 127; ++k) {
    const float p = std::ldexp(1.0f, k);
    EXPECT_EQ(ref::ue8m0_ceil(p), k + 127) << "2^" << k;
    if (k < 127) EXPECT_EQ(ref::ue8m0_ceil(std::nextafter(p, INFINITY)), std::min(k + 128, 254)) << k;
    if (k > -126) EXPECT_EQ(ref::ue8m0_ceil(std::nextafter(p, 0.0f)), k + 127) << k;
  }
}

TEST(UE8M0, TheLog2TrapIsAvoided) {
  // exp2(ceil(log2(r))) gives 1 for r just above 1 in fp32 (log2 rounds to 0); the bit-exact
  // ceil must give 2.
  const float r = std::nextafter(1.0f, 2.0f);
  EXPECT_EQ(ref::ue8m0_ceil(r), 128);
  EXPECT_EQ(ref::ue8m0_to_f32(128), 2.0f);
}

TEST(UE8M0, Clamped) {
  EXPECT_EQ(ref::ue8m0_ceil(1e-45f), 1);  // subnormal r
  EXPECT_EQ(ref::ue8m0_ceil(std::numeric_limits<float>::max()), 254);
  EXPECT_EQ(ref::ue8m0_to_f32(1), 0x1p-126f);
  EXPECT_EQ(ref::ue8m0_to_f32(254), 0x1p127f);
}

// ---- group scales -----------------------------------------------------------------------------

TEST(GroupScale, NoneRounding) {
  const auto g = ref::group_scale(3.0f, DType::e4m3, ScaleRounding::none);
  EXPECT_EQ(g.scale, 3.0f / 448.0f);
  EXPECT_EQ(g.multiplier, 448.0f / 3.0f);
  const auto i = ref::group_scale(3.0f, DType::i8, ScaleRounding::none);
  EXPECT_EQ(i.scale, 3.0f / 127.0f);
}

TEST(GroupScale, Pow2Rounding) {
  auto g = ref::group_scale(448.0f, DType::e4m3, ScaleRounding::pow2);
  EXPECT_EQ(g.ue8m0, 127);
  EXPECT_EQ(g.scale, 1.0f);
  EXPECT_EQ(g.multiplier, 1.0f);
  g = ref::group_scale(449.0f, DType::e4m3, ScaleRounding::pow2);
  EXPECT_EQ(g.ue8m0, 128);
  EXPECT_EQ(g.scale, 2.0f);
  EXPECT_EQ(g.multiplier, 0.5f);
  g = ref::group_scale(1.0f, DType::e4m3, ScaleRounding::pow2);  // r = 1/448 -> 2^-8
  EXPECT_EQ(g.scale, 0x1p-8f);
  EXPECT_EQ(g.multiplier, 256.0f);
}

TEST(GroupScale, AllZeroGroupIsFinite) {
  for (auto r : {ScaleRounding::none, ScaleRounding::pow2}) {
    const auto g = ref::group_scale(0.0f, DType::e4m3, r);
    EXPECT_TRUE(std::isfinite(g.scale) && g.scale > 0);
    EXPECT_TRUE(std::isfinite(g.multiplier) && g.multiplier > 0);
    EXPECT_EQ(ref::quantize_value(0.0f, g.multiplier, DType::e4m3), 0);
  }
  EXPECT_EQ(ref::group_scale(0.0f, DType::e4m3, ScaleRounding::none).scale, kAmaxFloor / 448.0f);
}

TEST(GroupScale, QuantizeValuePolicy) {
  EXPECT_EQ(ref::quantize_value(std::nanf(""), 2.0f, DType::e4m3), 0);
  EXPECT_EQ(ref::quantize_value(INFINITY, 2.0f, DType::e4m3), 0x7E);
  EXPECT_EQ(ref::quantize_value(-INFINITY, 2.0f, DType::e4m3), 0xFE);
  EXPECT_EQ(ref::quantize_value(std::nanf(""), 2.0f, DType::i8), 0);
  EXPECT_EQ(static_cast<int8_t>(ref::quantize_value(-INFINITY, 2.0f, DType::i8)), -127);
  EXPECT_EQ(static_cast<int8_t>(ref::quantize_value(10.25f, 2.0f, DType::i8)), 20);  // 20.5 -> 20
}

TEST(GroupScale, TinyF16GroupDoesNotSaturate) {
  // amax below 448 / 65504: a multiplier held in f16 would overflow to inf and turn the whole
  // group into +-448; in fp32 the codes are the ordinary ones.
  const float amax = ref::f16_to_f32(ref::f32_to_f16(1e-3f));
  const auto g = ref::group_scale(amax, DType::e4m3, ScaleRounding::none);
  EXPECT_GT(g.multiplier, 65504.0f);
  EXPECT_EQ(ref::quantize_value(amax, g.multiplier, DType::e4m3), 0x7E);
  const float half = ref::f16_to_f32(ref::f32_to_f16(0.5e-3f));
  const uint8_t c = ref::quantize_value(half, g.multiplier, DType::e4m3);
  EXPECT_NEAR(ref::e4m3_decode(c) * g.scale, half, half / 16);
  EXPECT_NE(c, 0x7E);
}

// ---- the kernels' scale division (kernels/scale_math.h) -------------------------------------------

// Mismatches of div_by_qmax(a, qmax) against a / qmax over every float a in [kAmaxFloor, FLT_MAX].
// With FMA hardware (x86-64-v3) the loop takes ~1.5 s; std::fmaf in software, ~10 s.
template <class Div>
uint64_t count_div_mismatches(float qmax, Div&& div) {
  uint64_t bad = 0;
  const uint32_t first = std::bit_cast<uint32_t>(kAmaxFloor), end = 0x7F800000u;  // +inf excluded
  for (uint32_t b = first; b < end; ++b) {
    const float a = std::bit_cast<float>(b);
    bad += div(a, qmax) != a / qmax;
  }
  return bad;
}

#if defined(__x86_64__)
__attribute__((target("fma"))) uint64_t mismatches_fma(float qmax) {
  return count_div_mismatches(qmax, [](float a, float q) { return kernels::div_by_qmax(a, q); });
}
#endif

TEST(ScaleMath, DivByQmaxIsCorrectlyRoundedForEveryFloat) {
  for (float qmax : {448.0f, 127.0f}) {
    uint64_t bad;
#if defined(__x86_64__)
    if (__builtin_cpu_supports("fma")) bad = mismatches_fma(qmax);
    else
#endif
      bad = count_div_mismatches(qmax, [](float a, float q) { return kernels::div_by_qmax(a, q); });
    EXPECT_EQ(bad, 0u) << "qmax " << qmax;
  }
  EXPECT_EQ(kernels::inv_qmax(448.0f), 1.0f / 448.0f);
  EXPECT_EQ(kernels::inv_qmax(127.0f), 1.0f / 127.0f);
}

}  // namespace
}  // namespace fp8route
