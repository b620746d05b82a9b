#pragma once
// The description of a group quantization (GroupQuantSpec) and the one function that turns
// (spec, T, H) into the shapes, strides and byte sizes of its codes and scales. Every entry point,
// allocation helper, binding and test uses quant_layout(); nothing else computes these.

#include <cstdint>
#include <string>
#include <string_view>

#include "fp8route/dtype.h"

namespace fp8route {

// Scale rounding: none (s = amax / qmax) or pow2 (s rounded up to a power of two: UE8M0).
enum class ScaleRounding : uint8_t { none, pow2 };
// Scale storage: f32, or four UE8M0 exponent bytes packed per int32 (pow2 rounding only).
enum class ScaleStorage : uint8_t { f32, ue8m0_packed };
// Scale layout: row_major [T, G]; col_major [G, T]; col_major_tma [G, align(T, 4)] so that each
// column starts 16-byte aligned (what TMA-fed GEMMs read). With ue8m0_packed storage, G counts
// int32 words (ceil(groups / 4)) instead of groups.
enum class ScaleLayout : uint8_t { row_major, col_major, col_major_tma };

std::string_view name(ScaleRounding r);
std::string_view name(ScaleStorage s);
std::string_view name(ScaleLayout l);
ScaleRounding parse_rounding(std::string_view s);
ScaleStorage parse_storage(std::string_view s);
ScaleLayout parse_layout(std::string_view s);

// Group sizes a kernel exists for.
inline constexpr int kGroupSizes[] = {16, 32, 64, 128, 256};
// The amax floor of docs/numerics.md: amax = max(amax, kAmaxFloor), so an all-zero group has a
// finite, non-zero scale.
inline constexpr float kAmaxFloor = 1e-10f;

struct GroupQuantSpec {
  int group_size = 128;
  DType code = DType::e4m3;  // e4m3 or i8
  ScaleRounding rounding = ScaleRounding::none;
  ScaleStorage storage = ScaleStorage::f32;
  ScaleLayout layout = ScaleLayout::row_major;
  bool operator==(const GroupQuantSpec&) const = default;
};

// "g128.e4m3.none.f32.row_major": the key used in logs, benchmark rows and error messages.
std::string to_string(const GroupQuantSpec& spec);
// Throws Error(invalid_argument) naming the field that breaks a rule (group size not in
// kGroupSizes, code not e4m3/i8, ue8m0_packed without pow2).
void validate(const GroupQuantSpec& spec);

// qmax of a code dtype: 448 for e4m3, 127 for i8.
float code_qmax(DType code);

// Shapes, strides (in elements) and bytes of the outputs of quantizing x[T, H] (experts = 0) or
// x[E, T, H] (experts = E >= 1, the masked MoE form). Codes are [T, H] / [E, T, H] of spec.code, contiguous. Scales are `scale_dtype` (f32, or i32 for
// ue8m0_packed) with batch stride `scale_batch_stride`; element (t, c) of expert e is at
// e * scale_batch_stride + t * scale_stride_t + c * scale_stride_c, c in [0, scale_cols).
// Everything in the scale buffer that no (t, c) < (T, scale_cols) addresses, and every packed byte
// past the last group, is padding and is written as zero.
struct QuantLayout {
  int64_t experts = 0, tokens = 0, hidden = 0;  // experts = 0: unbatched
  int64_t groups = 0;      // groups per row: hidden / group_size
  int64_t scale_cols = 0;  // groups (f32) or ceil(groups / 4) int32 words (ue8m0_packed)
  int64_t t_pad = 0;       // tokens, or align(tokens, 4) for col_major_tma
  DType code_dtype = DType::e4m3;
  DType scale_dtype = DType::f32;
  int code_ndim = 2, scale_ndim = 2;  // 3 when batched
  int64_t code_shape[3] = {}, scale_shape[3] = {};
  int64_t code_strides[3] = {}, scale_strides[3] = {};
  int64_t scale_stride_t = 0, scale_stride_c = 0, scale_batch_stride = 0;
  int64_t code_bytes = 0, scale_bytes = 0;
  int64_t scale_elems = 0;  // all experts
};

// Throws Error(invalid_argument) if the spec is invalid, T or H negative, or H not a multiple of
// the group size.
QuantLayout quant_layout(const GroupQuantSpec& spec, int64_t tokens, int64_t hidden,
                         int64_t experts = 0);

}  // namespace fp8route
