// The one layout function (docs/numerics.md, scale layouts): shapes, strides and bytes of quant outputs.

#include <cstdint>
#include <string>

#include "fp8route/error.h"
#include "fp8route/quant_layout.h"

namespace fp8route {

std::string_view name(ScaleRounding r) { return r == ScaleRounding::none ? "none" : "pow2"; }
std::string_view name(ScaleStorage s) { return s == ScaleStorage::f32 ? "f32" : "ue8m0_packed"; }
std::string_view name(ScaleLayout l) {
  switch (l) {
    case ScaleLayout::row_major: return "row_major";
    case ScaleLayout::col_major: return "col_major";
    case ScaleLayout::col_major_tma: return "col_major_tma";
  }
  return "?";
}

template <class E, size_t N>
static E parse_enum(std::string_view s, const E (&values)[N], const char* what) {
  std::string expected;
  for (E v : values) {
    if (name(v) == s) return v;
    expected += (expected.empty() ? "" : ", ") + std::string(name(v));
  }
  FP8ROUTE_CHECK(false, what << ": unknown value '" << s << "' (expected " << expected << ")");
  return values[0];
}

ScaleRounding parse_rounding(std::string_view s) {
  static constexpr ScaleRounding v[] = {ScaleRounding::none, ScaleRounding::pow2};
  return parse_enum(s, v, "rounding");
}
ScaleStorage parse_storage(std::string_view s) {
  static constexpr ScaleStorage v[] = {ScaleStorage::f32, ScaleStorage::ue8m0_packed};
  return parse_enum(s, v, "storage");
}
ScaleLayout parse_layout(std::string_view s) {
  static constexpr ScaleLayout v[] = {ScaleLayout::row_major, ScaleLayout::col_major,
                                      ScaleLayout::col_major_tma};
  return parse_enum(s, v, "layout");
}

std::string to_string(const GroupQuantSpec& s) {
  return "g" + std::to_string(s.group_size) + "." + std::string(dtype_name(s.code)) + "." +
         std::string(name(s.rounding)) + "." + std::string(name(s.storage)) + "." +
         std::string(name(s.layout));
}

float code_qmax(DType code) {
  FP8ROUTE_CHECK(code == DType::e4m3 || code == DType::i8,
                 "code dtype: " << dtype_name(code) << " is not a quantized code (e4m3 or i8)");
  return code == DType::e4m3 ? 448.0f : 127.0f;
}

void validate(const GroupQuantSpec& s) {
  bool known = false;
  for (int g : kGroupSizes) known |= g == s.group_size;
  FP8ROUTE_CHECK(known, "group_size: " << s.group_size << " is not one of 16, 32, 64, 128, 256");
  FP8ROUTE_CHECK(s.code == DType::e4m3 || s.code == DType::i8,
                 "code dtype: " << dtype_name(s.code) << " is not e4m3 or i8");
  FP8ROUTE_CHECK(s.storage != ScaleStorage::ue8m0_packed || s.rounding == ScaleRounding::pow2,
                 "storage: ue8m0_packed holds power-of-two exponents and needs rounding=pow2 "
                 "(got rounding=" << name(s.rounding) << ")");
}

namespace {

// a * b for a size of `what`; an error when it overflows 64 bits (sizes near 2^63 from a caller
// would otherwise wrap into small, valid-looking layouts).
int64_t size_product(int64_t a, int64_t b, const char* what) {
  int64_t r = 0;
  FP8ROUTE_CHECK(!__builtin_mul_overflow(a, b, &r), what << ": size overflows 64 bits (" << a << " x " << b << ")");
  return r;
}

}  // namespace

QuantLayout quant_layout(const GroupQuantSpec& spec, int64_t tokens, int64_t hidden,
                         int64_t experts) {
  validate(spec);
  FP8ROUTE_CHECK(tokens >= 0, "tokens: must be >= 0, got " << tokens);
  FP8ROUTE_CHECK(hidden > 0, "hidden: must be > 0, got " << hidden);
  FP8ROUTE_CHECK(experts >= 0, "experts: must be >= 0, got " << experts);
  FP8ROUTE_CHECK(hidden % spec.group_size == 0, "hidden: " << hidden
                     << " is not divisible by group_size " << spec.group_size);
  FP8ROUTE_CHECK(tokens <= INT64_MAX - 3, "tokens: " << tokens << " overflows 64 bits when padded to a multiple of 4");
  QuantLayout L;
  L.experts = experts;
  L.tokens = tokens;
  L.hidden = hidden;
  L.groups = hidden / spec.group_size;
  const bool packed = spec.storage == ScaleStorage::ue8m0_packed;
  L.scale_cols = packed ? (L.groups + 3) / 4 : L.groups;
  L.t_pad = spec.layout == ScaleLayout::col_major_tma ? (tokens + 3) / 4 * 4 : tokens;
  L.code_dtype = spec.code;
  L.scale_dtype = packed ? DType::i32 : DType::f32;

  const bool batched = experts > 0;
  const int64_t e = batched ? experts : 1;
  L.code_ndim = L.scale_ndim = batched ? 3 : 2;

  int64_t rows, cols;  // the per-expert scale matrix
  if (spec.layout == ScaleLayout::row_major) {
    rows = tokens;
    cols = L.scale_cols;
    L.scale_stride_t = L.scale_cols;
    L.scale_stride_c = 1;
  } else {
    rows = L.scale_cols;
    cols = L.t_pad;
    L.scale_stride_t = 1;
    L.scale_stride_c = L.t_pad;
  }
  L.scale_batch_stride = size_product(rows, cols, "tokens, hidden: scales");
  const int off = batched ? 1 : 0;
  const int64_t codes_per_expert = size_product(tokens, hidden, "tokens, hidden: codes");
  if (batched) {
    L.code_shape[0] = experts;
    L.code_strides[0] = codes_per_expert;
    L.scale_shape[0] = experts;
    L.scale_strides[0] = L.scale_batch_stride;
  }
  L.code_shape[off] = tokens;
  L.code_shape[off + 1] = hidden;
  L.code_strides[off] = hidden;
  L.code_strides[off + 1] = 1;
  L.scale_shape[off] = rows;
  L.scale_shape[off + 1] = cols;
  L.scale_strides[off] = cols;
  L.scale_strides[off + 1] = 1;
  L.code_bytes = size_product(e, codes_per_expert, "experts, tokens, hidden: codes");
  L.scale_elems = size_product(e, L.scale_batch_stride, "experts, tokens, hidden: scales");
  L.scale_bytes = size_product(L.scale_elems, 4, "experts, tokens, hidden: scale bytes");
  return L;
}

}  // namespace fp8route
