// Scalar formats of the CPU reference (docs/numerics.md): E4M3, INT8, 16-bit floats, UE8M0 scales.

#include <bit>
#include <cmath>
#include <cstring>

#include "fp8route/error.h"
#include "fp8route/reference.h"

namespace fp8route::ref {

static float round_half_even(float v) {
  // std::nearbyint rounds in the current mode, which fp8route never changes from to-nearest-even.
  return std::nearbyint(v);
}

uint8_t e4m3_encode(float v) {
  const uint32_t bits = std::bit_cast<uint32_t>(v);
  const uint8_t sign = static_cast<uint8_t>((bits >> 24) & 0x80);
  if (std::isnan(v)) return 0x7F;
  const float a = std::fabs(v);
  if (a >= 464.0f) return sign | 0x7E;  // includes +-inf: satfinite
  if (a < 0x1p-6f) {
    // Subnormal range: a multiple of 2^-9. a * 2^9 is exact; q in [0, 8], 8 being the smallest normal.
    const int q = static_cast<int>(round_half_even(a * 0x1p9f));
    return sign | static_cast<uint8_t>(q);
  }
  int e = static_cast<int>((std::bit_cast<uint32_t>(a) >> 23) & 0xFF) - 127;  // floor(log2 a)
  // Three mantissa bits: the quantum at exponent e is 2^(e-3); a / quantum is exact (power of two).
  int q = static_cast<int>(round_half_even(std::ldexp(a, 3 - e)));  // in [8, 16]
  if (q == 16) {
    q = 8;
    ++e;
  }
  return sign | static_cast<uint8_t>(((e + 7) << 3) | (q - 8));
}

float e4m3_decode(uint8_t code) {
  const float sign = (code & 0x80) ? -1.0f : 1.0f;
  const int exp = (code >> 3) & 0xF;
  const int man = code & 0x7;
  if (exp == 0xF && man == 0x7) return std::nanf("");
  if (exp == 0) return sign * std::ldexp(static_cast<float>(man), -9);
  return sign * std::ldexp(1.0f + man / 8.0f, exp - 7);
}

int8_t i8_encode(float v) {
  if (std::isnan(v)) return 0;
  if (v >= 127.0f) return 127;
  if (v <= -127.0f) return -127;
  return static_cast<int8_t>(round_half_even(v));
}

float bf16_to_f32(uint16_t bits) { return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16); }

uint16_t f32_to_bf16(float v) {
  uint32_t b = std::bit_cast<uint32_t>(v);
  if (std::isnan(v)) return static_cast<uint16_t>((b >> 16) | 0x40);  // keep it a quiet NaN
  const uint32_t lsb = (b >> 16) & 1;
  b += 0x7FFF + lsb;  // round to nearest even; overflow to the exponent is the correct carry
  return static_cast<uint16_t>(b >> 16);
}

float f16_to_f32(uint16_t h) {
  const float sign = (h & 0x8000) ? -1.0f : 1.0f;
  const int exp = (h >> 10) & 0x1F;
  const int man = h & 0x3FF;
  if (exp == 0x1F) return man ? std::nanf("") : sign * INFINITY;
  if (exp == 0) return sign * std::ldexp(static_cast<float>(man), -24);
  return sign * std::ldexp(1.0f + man / 1024.0f, exp - 15);
}

uint16_t f32_to_f16(float v) {
  const uint16_t sign = std::signbit(v) ? 0x8000 : 0;
  if (std::isnan(v)) return 0x7E00;
  float a = std::fabs(v);
  if (a >= 65520.0f) return sign | 0x7C00;  // rounds to inf (65504 + half an ulp and above)
  if (a < 0x1p-14f) {                       // subnormal: multiples of 2^-24
    return sign | static_cast<uint16_t>(round_half_even(a * 0x1p24f));
  }
  int e = static_cast<int>((std::bit_cast<uint32_t>(a) >> 23) & 0xFF) - 127;
  int q = static_cast<int>(round_half_even(std::ldexp(a, 10 - e)));  // [1024, 2048]
  if (q == 2048) {
    q = 1024;
    ++e;
  }
  if (e > 15) return sign | 0x7C00;
  return sign | static_cast<uint16_t>(((e + 15) << 10) | (q - 1024));
}

float load_as_f32(const void* data, DType dtype, int64_t i) {
  switch (dtype) {
    case DType::f32: return static_cast<const float*>(data)[i];
    case DType::f16: return f16_to_f32(static_cast<const uint16_t*>(data)[i]);
    case DType::bf16: return bf16_to_f32(static_cast<const uint16_t*>(data)[i]);
    default: break;
  }
  FP8ROUTE_CHECK(false, "x: dtype " << dtype_name(dtype) << " is not f32, f16 or bf16");
  return 0;
}

uint8_t ue8m0_ceil(float r) {
  const uint32_t bits = std::bit_cast<uint32_t>(r);
  int e = static_cast<int>((bits >> 23) & 0xFF);
  if (bits & 0x7FFFFF) ++e;
  if (e < 1) e = 1;
  if (e > 254) e = 254;
  return static_cast<uint8_t>(e);
}

// 2^k for k in [-149, 127], exactly (subnormal results included).
static float exact_pow2(int k) { return std::ldexp(1.0f, k); }

float ue8m0_to_f32(uint8_t e) { return exact_pow2(static_cast<int>(e) - 127); }

GroupScale group_scale(float amax, DType code, ScaleRounding rounding) {
  const float qmax = code_qmax(code);
  if (!(amax >= kAmaxFloor)) amax = kAmaxFloor;  // also catches a NaN amax
  GroupScale g{};
  if (rounding == ScaleRounding::none) {
    g.scale = amax / qmax;
    g.multiplier = qmax / amax;
    g.ue8m0 = 0;
  } else {
    g.ue8m0 = ue8m0_ceil(amax / qmax);
    g.scale = exact_pow2(static_cast<int>(g.ue8m0) - 127);
    g.multiplier = exact_pow2(127 - static_cast<int>(g.ue8m0));
  }
  return g;
}

uint8_t quantize_value(float x, float m, DType code) {
  if (std::isnan(x)) return 0;
  const float v = x * m;
  if (code == DType::e4m3) return e4m3_encode(v);
  return static_cast<uint8_t>(i8_encode(v));
}

float silu_and_mul(float gate, float up) { return gate / (1.0f + std::exp(-gate)) * up; }

}  // namespace fp8route::ref
