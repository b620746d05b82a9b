#pragma once
// The CPU reference of fp8route's arithmetic, written from docs/numerics.md and nothing else. The GPU
// kernels are tested against it, bit for bit where docs/numerics.md says so. Slow and simple on purpose.

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "fp8route/dtype.h"
#include "fp8route/quant_layout.h"
#include "fp8route/scale_kind.h"

namespace fp8route::ref {

// ---- scalar formats ---------------------------------------------------------------------------

// fp32 -> E4M3 (e4m3fn) byte as `cvt.rn.satfinite.e4m3x2.f32` does it: round to nearest, ties to
// even; |v| >= 464 and +-inf saturate to +-448; NaN -> 0x7F; the sign of zero is kept.
uint8_t e4m3_encode(float v);
float e4m3_decode(uint8_t code);  // 0x7F / 0xFF decode to NaN
// fp32 -> INT8 code: round to nearest even, saturate to [-127, 127], NaN -> 0.
int8_t i8_encode(float v);

// 16-bit float conversions (exact widening; narrowing rounds to nearest even).
float bf16_to_f32(uint16_t bits);
float f16_to_f32(uint16_t bits);
uint16_t f32_to_bf16(float v);
uint16_t f32_to_f16(float v);
// Value of element i of a host buffer of dtype f32, f16 or bf16, widened exactly to fp32.
float load_as_f32(const void* data, DType dtype, int64_t i);

// ---- scales -----------------------------------------------------------------------------------

// Biased exponent e of the smallest power of two >= r (r > 0, finite), clamped to [1, 254]:
// bit-exact ceil (docs/numerics.md), never exp2(ceil(log2(r))).
uint8_t ue8m0_ceil(float r);
float ue8m0_to_f32(uint8_t e);  // 2^(e - 127)

struct GroupScale {
  float scale;       // s
  float multiplier;  // m
  uint8_t ue8m0;     // e (pow2 rounding only; 0 otherwise)
};
// Scale and multiplier of a group whose finite-amax is `amax` (the floor is applied here).
GroupScale group_scale(float amax, DType code, ScaleRounding rounding);
// Code byte (E4M3 or INT8 two's complement) of x with multiplier m; NaN -> 0, +-inf -> +-qmax.
uint8_t quantize_value(float x, float multiplier, DType code);

// ---- group quantization -----------------------------------------------------------------------

struct QuantOutput {
  QuantLayout layout;
  std::vector<uint8_t> codes;   // layout.code_bytes
  std::vector<uint8_t> scales;  // layout.scale_bytes, padding zero
};

// Per-token-group quantization of x[T, H] (row stride `x_row_stride` elements, f32/f16/bf16) into
// the exact byte image the GPU writes, padding included.
QuantOutput per_token_group_quant(const void* x, DType x_dtype, int64_t tokens, int64_t hidden,
                                  int64_t x_row_stride, const GroupQuantSpec& spec);

// silu(gate) * up in fp32, gate = x[t, 0:H], up = x[t, H:2H] (docs/numerics.md, fused silu_and_mul).
float silu_and_mul(float gate, float up);
// act[T, H] (f32, contiguous) of x[T, 2H] with row stride x_row_stride.
std::vector<float> silu_and_mul_rows(const void* x, DType x_dtype, int64_t tokens, int64_t hidden,
                                     int64_t x_row_stride);

// Per-token: codes [T, H] and one fp32 scale per row (a group of size H).
struct RowQuantOutput {
  std::vector<uint8_t> codes;
  std::vector<float> scales;
};
RowQuantOutput per_token_quant(const void* x, DType x_dtype, int64_t tokens, int64_t hidden,
                               int64_t x_row_stride, DType code, ScaleRounding rounding);
// Per-tensor, static: codes of x / scale (correctly rounded), NaN -> 0, saturating.
std::vector<uint8_t> per_tensor_quant_static(const void* x, DType x_dtype, int64_t tokens,
                                             int64_t hidden, int64_t x_row_stride, float scale,
                                             DType code);
// Per-tensor, dynamic: the whole tensor as one group; scales holds the one scale.
RowQuantOutput per_tensor_quant_dynamic(const void* x, DType x_dtype, int64_t tokens,
                                        int64_t hidden, int64_t x_row_stride, DType code);

// ---- RMSNorm ------------------------------------------------------------------------------------

// RMSNorm of x[T, H] (bf16 or f16, rows `row_stride` elements apart; residual likewise, or null)
// with weight[H], as docs/numerics.md "RMSNorm" defines it: h = x (+ residual, rounded to the
// dtype), ss = sum of h^2 in double, inv = float(1 / sqrt(ss / H + eps)) in double,
// y = dtype(fp32(fp32(h * inv) * w)). Returns the 16-bit words of y [T, H] and of h [T, H]
// (h only with a residual), contiguous.
struct RmsNormOutput {
  std::vector<uint16_t> y, h;
};
RmsNormOutput rms_norm(const void* x, const void* residual, int64_t row_stride, const void* weight, DType dtype,
                       int64_t tokens, int64_t hidden, float eps);

// ---- Decode attention ---------------------------------------------------------------------------

// Decode attention as docs/numerics.md "Decode attention" defines it, on contiguous host copies
// (16-bit words of `dtype`, bf16 or f16): qkv [B, (Hq + 2 Hk) * D], caches [B, Hk, S, D] (updated
// in place at each sequence's position), cos/sin [>= S, D], positions [B], q_norm/k_norm [D] or
// null. Per head: optional RMSNorm (as rms_norm above, over D), rotation in fp32 rounded to the
// dtype, then softmax(q k^T * scale) v in double over positions max(0, p - window + 1) .. p.
// Returns out [B, Hq * D] as doubles (unrounded); a sequence whose position is outside [0, S)
// gets NaN and leaves the caches alone.
struct DecodeAttentionProblem {
  DType dtype = DType::bf16;
  int64_t batch = 0, hq = 0, hk = 0, head_dim = 0, seq = 0;
  const uint16_t* qkv = nullptr;
  uint16_t* k_cache = nullptr;
  uint16_t* v_cache = nullptr;
  const uint16_t* cos = nullptr;
  const uint16_t* sin = nullptr;
  const int32_t* positions = nullptr;
  const uint16_t* q_norm = nullptr;
  const uint16_t* k_norm = nullptr;
  float eps = 1e-6f;
  float scale = 0.0f;  // 0: 1 / sqrt(D)
  int window = 0;
};
std::vector<double> decode_attention(const DecodeAttentionProblem& p);

// ---- GEMM ---------------------------------------------------------------------------------------

// y[M, N] = (sum_k a[m, k] * b[n, k]) * sa * sb (+ bias[n]) in fp64 on dequantized E4M3 operands,
// rounded once to `out` (bf16 or f16; f32 returns the unrounded value as float).
//  tensor: sa, sb of size 1.
//  row:    sa of size M or 1, sb of size N or 1.
//  block:  sa [ceil(K/128), align(M, 4)] (M-major), sb [ceil(N/128), ceil(K/128)].
// Returns y as floats (the values of the rounded outputs).
std::vector<float> scaled_mm(std::span<const uint8_t> a, std::span<const uint8_t> b, int64_t m,
                             int64_t n, int64_t k, ScaleKind kind, std::span<const float> sa,
                             std::span<const float> sb, std::span<const float> bias, DType out);

}  // namespace fp8route::ref
