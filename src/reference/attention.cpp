// CPU reference of the fused decode attention (docs/numerics.md, "Decode attention"): a direct
// transcription, one sequence and head at a time.

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "fp8route/error.h"
#include "fp8route/reference.h"

namespace fp8route::ref {

namespace {

float to_f32(uint16_t w, DType dtype) { return dtype == DType::bf16 ? bf16_to_f32(w) : f16_to_f32(w); }
uint16_t to_bits(float v, DType dtype) { return dtype == DType::bf16 ? f32_to_bf16(v) : f32_to_f16(v); }
float round_to(float v, DType dtype) { return to_f32(to_bits(v, dtype), dtype); }
// fp32(a * b): the product of a 16-bit float and a float is exact in double.
float mul(float a, float b) { return static_cast<float>(static_cast<double>(a) * b); }

// One head of D values: optional RMSNorm over D, then the rotation at row `pos` of the tables;
// the results rounded to the dtype.
std::vector<float> norm_rotate(const DecodeAttentionProblem& p, const uint16_t* src, const uint16_t* w, int64_t pos) {
  const int64_t d = p.head_dim, half = d / 2;
  std::vector<float> x(static_cast<size_t>(d));
  for (int64_t i = 0; i < d; ++i) x[i] = to_f32(src[i], p.dtype);
  if (w) {
    double ss = 0.0;
    for (int64_t i = 0; i < d; ++i) ss += static_cast<double>(x[i]) * x[i];
    const float inv = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(d) + static_cast<double>(p.eps)));
    for (int64_t i = 0; i < d; ++i) x[i] = round_to(mul(round_to(mul(x[i], inv), p.dtype), to_f32(w[i], p.dtype)), p.dtype);
  }
  std::vector<float> y(static_cast<size_t>(d));
  const uint16_t* c = p.cos + pos * d;
  const uint16_t* s = p.sin + pos * d;
  for (int64_t i = 0; i < half; ++i) {
    const float a1 = mul(x[i], to_f32(c[i], p.dtype)), b1 = mul(-x[i + half], to_f32(s[i], p.dtype));
    const float a2 = mul(x[i + half], to_f32(c[i + half], p.dtype)), b2 = mul(x[i], to_f32(s[i + half], p.dtype));
    y[i] = round_to(a1 + b1, p.dtype);
    y[i + half] = round_to(a2 + b2, p.dtype);
  }
  return y;
}

}  // namespace

std::vector<double> decode_attention(const DecodeAttentionProblem& p) {
  FP8ROUTE_CHECK(p.dtype == DType::bf16 || p.dtype == DType::f16, "ref::decode_attention: dtype must be bf16 or f16");
  FP8ROUTE_CHECK(p.hk > 0 && p.hq % p.hk == 0 && p.head_dim % 2 == 0 && p.seq > 0,
                 "ref::decode_attention: bad head counts or sizes");
  const int64_t d = p.head_dim, group = p.hq / p.hk, cols = (p.hq + 2 * p.hk) * d;
  const double scale = p.scale > 0.0f ? p.scale : 1.0 / std::sqrt(static_cast<double>(d));
  std::vector<double> out(static_cast<size_t>(p.batch * p.hq * d), std::numeric_limits<double>::quiet_NaN());
  for (int64_t b = 0; b < p.batch; ++b) {
    const int64_t pos = p.positions[b];
    if (pos < 0 || pos >= p.seq) continue;
    const int64_t lo = p.window > 0 ? std::max<int64_t>(0, pos - p.window + 1) : 0;
    const uint16_t* row = p.qkv + b * cols;
    for (int64_t h = 0; h < p.hk; ++h) {
      const int64_t base = (b * p.hk + h) * p.seq * d;
      const std::vector<float> k = norm_rotate(p, row + (p.hq + h) * d, p.k_norm, pos);
      for (int64_t i = 0; i < d; ++i) {
        p.k_cache[base + pos * d + i] = to_bits(k[i], p.dtype);
        p.v_cache[base + pos * d + i] = row[(p.hq + p.hk + h) * d + i];
      }
      for (int64_t j = 0; j < group; ++j) {
        const int64_t qh = h * group + j;
        const std::vector<float> q = norm_rotate(p, row + qh * d, p.q_norm, pos);
        std::vector<double> score(static_cast<size_t>(pos - lo + 1));
        double mx = -std::numeric_limits<double>::infinity();
        for (int64_t t = lo; t <= pos; ++t) {
          double s = 0.0;
          for (int64_t i = 0; i < d; ++i) s += static_cast<double>(q[i]) * to_f32(p.k_cache[base + t * d + i], p.dtype);
          score[t - lo] = s * scale;
          mx = std::max(mx, score[t - lo]);
        }
        double sum = 0.0;
        for (double& s : score) sum += (s = std::exp(s - mx));
        for (int64_t i = 0; i < d; ++i) {
          double acc = 0.0;
          for (int64_t t = lo; t <= pos; ++t) acc += score[t - lo] * to_f32(p.v_cache[base + t * d + i], p.dtype);
          out[(b * p.hq + qh) * d + i] = acc / sum;
        }
      }
    }
  }
  return out;
}

}  // namespace fp8route::ref
