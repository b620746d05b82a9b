// CPU reference of RMSNorm (docs/numerics.md, "RMSNorm"): a direct transcription, one row at a
// time, sums in index order.

#include <cmath>

#include "fp8route/error.h"
#include "fp8route/reference.h"

namespace fp8route::ref {

namespace {
float round_to(float v, DType dtype) {
  return dtype == DType::bf16 ? bf16_to_f32(f32_to_bf16(v)) : f16_to_f32(f32_to_f16(v));
}
uint16_t bits_of(float v, DType dtype) { return dtype == DType::bf16 ? f32_to_bf16(v) : f32_to_f16(v); }
}  // namespace

RmsNormOutput rms_norm(const void* x, const void* residual, int64_t row_stride, const void* weight, DType dtype,
                       int64_t tokens, int64_t hidden, float eps) {
  FP8ROUTE_CHECK(dtype == DType::bf16 || dtype == DType::f16, "ref::rms_norm: dtype must be bf16 or f16");
  RmsNormOutput out;
  out.y.resize(static_cast<size_t>(tokens * hidden));
  if (residual) out.h.resize(out.y.size());
  std::vector<float> h(static_cast<size_t>(hidden));
  for (int64_t t = 0; t < tokens; ++t) {
    double ss = 0.0;
    for (int64_t i = 0; i < hidden; ++i) {
      float v = load_as_f32(x, dtype, t * row_stride + i);
      if (residual) {
        v = round_to(v + load_as_f32(residual, dtype, t * row_stride + i), dtype);
        out.h[t * hidden + i] = bits_of(v, dtype);
      }
      h[i] = v;
      ss += static_cast<double>(v) * static_cast<double>(v);
    }
    const float inv = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(hidden) + static_cast<double>(eps)));
    for (int64_t i = 0; i < hidden; ++i) {
      const float a = h[i] * inv;
      out.y[t * hidden + i] = bits_of(a * load_as_f32(weight, dtype, i), dtype);
    }
  }
  return out;
}

}  // namespace fp8route::ref
