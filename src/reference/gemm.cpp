// CPU reference of the scaled FP8 GEMM (docs/numerics.md, "GEMM"): fp64 on dequantized
// operands, scales applied in fp64, one rounding to the output dtype.

#include <bit>
#include <cmath>
#include <vector>

#include "fp8route/error.h"
#include "fp8route/reference.h"

namespace fp8route::ref {

// double -> float rounded to odd: truncate, then set the last bit if anything was dropped. Rounding
// that float once more to bf16/f16 (>= 2 fewer mantissa bits) then equals rounding v directly:
// no double-rounding error in the reference.
static float to_f32_round_odd(double v) {
  float f = static_cast<float>(v);
  if (static_cast<double>(f) == v || !std::isfinite(f)) return f;
  if (std::fabs(static_cast<double>(f)) > std::fabs(v)) f = std::nextafter(f, 0.0f);
  return std::bit_cast<float>(std::bit_cast<uint32_t>(f) | 1u);
}

static float round_to(double v, DType out) {
  const float f = out == DType::f32 ? static_cast<float>(v) : to_f32_round_odd(v);
  switch (out) {
    case DType::bf16: return bf16_to_f32(f32_to_bf16(f));
    case DType::f16: return f16_to_f32(f32_to_f16(f));
    case DType::f32: return f;
    default: break;
  }
  FP8ROUTE_CHECK(false, "out dtype: " << dtype_name(out) << " is not bf16, f16 or f32");
  return 0;
}

std::vector<float> scaled_mm(std::span<const uint8_t> a, std::span<const uint8_t> b, int64_t m,
                             int64_t n, int64_t k, ScaleKind kind, std::span<const float> sa,
                             std::span<const float> sb, std::span<const float> bias, DType out) {
  FP8ROUTE_CHECK(static_cast<int64_t>(a.size()) == m * k, "a: expected " << m * k << " codes");
  FP8ROUTE_CHECK(static_cast<int64_t>(b.size()) == n * k, "b: expected " << n * k << " codes");
  FP8ROUTE_CHECK(bias.empty() || static_cast<int64_t>(bias.size()) == n,
                 "bias: expected " << n << " values");
  const int64_t kb = (k + kScaleBlock - 1) / kScaleBlock;
  const int64_t nb = (n + kScaleBlock - 1) / kScaleBlock;
  const int64_t m_pad = (m + 3) / 4 * 4;
  switch (kind) {
    case ScaleKind::tensor:
      FP8ROUTE_CHECK(sa.size() == 1 && sb.size() == 1, "tensor scales: sa and sb must be scalars");
      break;
    case ScaleKind::row:
      FP8ROUTE_CHECK(sa.size() == 1 || static_cast<int64_t>(sa.size()) == m,
                     "row scales: sa must have 1 or M=" << m << " values");
      FP8ROUTE_CHECK(sb.size() == 1 || static_cast<int64_t>(sb.size()) == n,
                     "row scales: sb must have 1 or N=" << n << " values");
      break;
    case ScaleKind::block:
      FP8ROUTE_CHECK(static_cast<int64_t>(sa.size()) == kb * m_pad,
                     "block scales: sa must be [ceil(K/128), align(M,4)] = " << kb * m_pad);
      FP8ROUTE_CHECK(static_cast<int64_t>(sb.size()) == nb * kb,
                     "block scales: sb must be [ceil(N/128), ceil(K/128)] = " << nb * kb);
      break;
  }
  std::vector<double> da(a.size()), db(b.size());
  for (size_t i = 0; i < a.size(); ++i) da[i] = e4m3_decode(a[i]);
  for (size_t i = 0; i < b.size(); ++i) db[i] = e4m3_decode(b[i]);

  std::vector<float> y(static_cast<size_t>(m * n));
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      const double* ar = &da[i * k];
      const double* br = &db[j * k];
      double acc = 0.0;
      if (kind == ScaleKind::block) {
        for (int64_t q = 0; q < kb; ++q) {
          double part = 0.0;
          const int64_t k_end = std::min(k, (q + 1) * kScaleBlock);
          for (int64_t x = q * kScaleBlock; x < k_end; ++x) part += ar[x] * br[x];
          acc += part * static_cast<double>(sa[q * m_pad + i]) *
                 static_cast<double>(sb[(j / kScaleBlock) * kb + q]);
        }
      } else {
        for (int64_t x = 0; x < k; ++x) acc += ar[x] * br[x];
        const double s_a = sa.size() == 1 ? sa[0] : sa[i];
        const double s_b = sb.size() == 1 ? sb[0] : sb[j];
        acc *= s_a * s_b;
      }
      if (!bias.empty()) acc += bias[j];
      y[i * n + j] = round_to(acc, out);
    }
  }
  return y;
}

}  // namespace fp8route::ref
