// CPU reference of per-token-group, per-token and per-tensor quantization (docs/numerics.md,
// "Quantizing one group").

#include <cmath>
#include <cstring>

#include "fp8route/error.h"
#include "fp8route/reference.h"

namespace fp8route::ref {

namespace {

// The finite-amax of n values at x[base + i * 1] (as fp32).
float finite_amax(const void* x, DType dtype, int64_t base, int64_t n) {
  float amax = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    const float v = load_as_f32(x, dtype, base + i);
    if (std::isfinite(v)) amax = std::fmax(amax, std::fabs(v));
  }
  return amax;
}

// Quantizes rows of x [T, H] (row stride `stride`) in groups of `group`; calls
// put_scale(t, g, GroupScale) for each group.
template <class PutScale>
void quantize_rows(const void* x, DType dtype, int64_t tokens, int64_t hidden, int64_t stride,
                   int64_t group, DType code, ScaleRounding rounding, uint8_t* codes,
                   PutScale&& put_scale) {
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t g = 0; g < hidden / group; ++g) {
      const int64_t base = t * stride + g * group;
      const GroupScale s = group_scale(finite_amax(x, dtype, base, group), code, rounding);
      for (int64_t i = 0; i < group; ++i)
        codes[t * hidden + g * group + i] = quantize_value(load_as_f32(x, dtype, base + i), s.multiplier, code);
      put_scale(t, g, s);
    }
}

}  // namespace

QuantOutput per_token_group_quant(const void* x, DType x_dtype, int64_t tokens, int64_t hidden,
                                  int64_t x_row_stride, const GroupQuantSpec& spec) {
  QuantOutput out;
  out.layout = quant_layout(spec, tokens, hidden);
  const QuantLayout& L = out.layout;
  out.codes.assign(static_cast<size_t>(L.code_bytes), 0);
  out.scales.assign(static_cast<size_t>(L.scale_bytes), 0);
  quantize_rows(x, x_dtype, tokens, hidden, x_row_stride, spec.group_size, spec.code, spec.rounding,
                out.codes.data(), [&](int64_t t, int64_t g, const GroupScale& s) {
                  if (spec.storage == ScaleStorage::f32) {
                    const int64_t idx = t * L.scale_stride_t + g * L.scale_stride_c;
                    std::memcpy(&out.scales[idx * 4], &s.scale, 4);
                  } else {
                    // Byte g % 4 (little-endian) of word g / 4.
                    const int64_t word = t * L.scale_stride_t + (g / 4) * L.scale_stride_c;
                    out.scales[word * 4 + g % 4] = s.ue8m0;
                  }
                });
  return out;
}

std::vector<float> silu_and_mul_rows(const void* x, DType x_dtype, int64_t tokens, int64_t hidden,
                                     int64_t x_row_stride) {
  std::vector<float> act(static_cast<size_t>(tokens * hidden));
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t i = 0; i < hidden; ++i)
      act[t * hidden + i] = silu_and_mul(load_as_f32(x, x_dtype, t * x_row_stride + i),
                                         load_as_f32(x, x_dtype, t * x_row_stride + hidden + i));
  return act;
}

RowQuantOutput per_token_quant(const void* x, DType x_dtype, int64_t tokens, int64_t hidden,
                               int64_t x_row_stride, DType code, ScaleRounding rounding) {
  RowQuantOutput out;
  out.codes.assign(static_cast<size_t>(tokens * hidden), 0);
  out.scales.assign(static_cast<size_t>(tokens), 0.0f);
  quantize_rows(x, x_dtype, tokens, hidden, x_row_stride, hidden, code, rounding, out.codes.data(),
                [&](int64_t t, int64_t, const GroupScale& s) { out.scales[t] = s.scale; });
  return out;
}

std::vector<uint8_t> per_tensor_quant_static(const void* x, DType x_dtype, int64_t tokens,
                                             int64_t hidden, int64_t x_row_stride, float scale,
                                             DType code) {
  std::vector<uint8_t> codes(static_cast<size_t>(tokens * hidden));
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t i = 0; i < hidden; ++i)
      codes[t * hidden + i] = quantize_value(load_as_f32(x, x_dtype, t * x_row_stride + i) / scale, 1.0f, code);
  return codes;
}

RowQuantOutput per_tensor_quant_dynamic(const void* x, DType x_dtype, int64_t tokens,
                                        int64_t hidden, int64_t x_row_stride, DType code) {
  float amax = 0.0f;
  for (int64_t t = 0; t < tokens; ++t)
    amax = std::fmax(amax, finite_amax(x, x_dtype, t * x_row_stride, hidden));
  const GroupScale s = group_scale(amax, code, ScaleRounding::none);
  RowQuantOutput out;
  out.scales = {s.scale};
  out.codes.resize(static_cast<size_t>(tokens * hidden));
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t i = 0; i < hidden; ++i)
      out.codes[t * hidden + i] = quantize_value(load_as_f32(x, x_dtype, t * x_row_stride + i), s.multiplier, code);
  return out;
}

}  // namespace fp8route::ref
