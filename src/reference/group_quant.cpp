// CPU reference of per-token-group quantization (NUMERICS.md, "Quantizing one group").

#include <cmath>
#include <cstring>

#include "fp8route/error.h"
#include "fp8route/reference.h"

namespace fp8route::ref {

QuantOutput per_token_group_quant(const void* x, DType x_dtype, int64_t tokens, int64_t hidden,
                                  int64_t x_row_stride, const GroupQuantSpec& spec) {
  QuantOutput out;
  out.layout = quant_layout(spec, tokens, hidden);
  const QuantLayout& L = out.layout;
  out.codes.assign(static_cast<size_t>(L.code_bytes), 0);
  out.scales.assign(static_cast<size_t>(L.scale_bytes), 0);
  const int64_t G = spec.group_size;
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t g = 0; g < L.groups; ++g) {
      const int64_t base = t * x_row_stride + g * G;
      float amax = 0.0f;
      for (int64_t i = 0; i < G; ++i) {
        const float v = load_as_f32(x, x_dtype, base + i);
        if (std::isfinite(v)) amax = std::fmax(amax, std::fabs(v));
      }
      const GroupScale s = group_scale(amax, spec.code, spec.rounding);
      for (int64_t i = 0; i < G; ++i)
        out.codes[t * hidden + g * G + i] =
            quantize_value(load_as_f32(x, x_dtype, base + i), s.multiplier, spec.code);
      if (spec.storage == ScaleStorage::f32) {
        const int64_t idx = t * L.scale_stride_t + g * L.scale_stride_c;
        std::memcpy(&out.scales[idx * 4], &s.scale, 4);
      } else {
        // Byte g % 4 (little-endian) of word g / 4.
        const int64_t word = t * L.scale_stride_t + (g / 4) * L.scale_stride_c;
        out.scales[word * 4 + g % 4] = s.ue8m0;
      }
    }
  }
  return out;
}

}  // namespace fp8route::ref
