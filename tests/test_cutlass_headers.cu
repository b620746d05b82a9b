// The CUTLASS headers found from the nvidia-cutlass package compile here, and CUTLASS's E4M3
// type decodes every code as the CPU reference does (an independent decoder).

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include <cutlass/numeric_types.h>

#include "fp8route/reference.h"

TEST(CutlassHeaders, E4M3DecodeAgreesWithReference) {
  for (int c = 0; c < 256; ++c) {
    cutlass::float_e4m3_t v = cutlass::float_e4m3_t::bitcast(static_cast<uint8_t>(c));
    const float got = static_cast<float>(v);
    const float want = fp8route::ref::e4m3_decode(static_cast<uint8_t>(c));
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << c;
    } else {
      EXPECT_EQ(got, want) << "code " << c;
      EXPECT_EQ(std::signbit(got), std::signbit(want)) << "code " << c;
    }
  }
}
