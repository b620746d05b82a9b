#include "fp8route/dtype.h"

#include <string>

#include "fp8route/error.h"
#include "fp8route/scale_kind.h"

namespace fp8route {

int dtype_size(DType t) {
  switch (t) {
    case DType::f32: case DType::i32: return 4;
    case DType::f16: case DType::bf16: return 2;
    case DType::e4m3: case DType::i8: return 1;
  }
  return 0;
}

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
    case DType::e4m3: return "e4m3";
    case DType::i8: return "i8";
    case DType::i32: return "i32";
  }
  return "?";
}

DType parse_dtype(std::string_view s, std::string_view what) {
  struct Alias { std::string_view name; DType t; };
  static constexpr Alias aliases[] = {
      {"f32", DType::f32},   {"float32", DType::f32},        {"fp32", DType::f32},
      {"f16", DType::f16},   {"float16", DType::f16},        {"fp16", DType::f16},
      {"bf16", DType::bf16}, {"bfloat16", DType::bf16},      {"e4m3", DType::e4m3},
      {"fp8", DType::e4m3},  {"float8_e4m3fn", DType::e4m3}, {"i8", DType::i8},
      {"int8", DType::i8},   {"i32", DType::i32},            {"int32", DType::i32}};
  for (const auto& a : aliases)
    if (a.name == s) return a.t;
  FP8ROUTE_CHECK(false, what << ": unknown dtype '" << s
                             << "' (expected f32, f16, bf16, e4m3, i8 or i32)");
  return DType::f32;
}

std::string_view name(ScaleKind k) {
  switch (k) {
    case ScaleKind::tensor: return "tensor";
    case ScaleKind::row: return "row";
    case ScaleKind::block: return "block";
  }
  return "?";
}

ScaleKind parse_scale_kind(std::string_view s) {
  for (ScaleKind k : {ScaleKind::tensor, ScaleKind::row, ScaleKind::block})
    if (name(k) == s) return k;
  FP8ROUTE_CHECK(false, "scale: unknown scale kind '" << s << "' (expected tensor, row or block)");
  return ScaleKind::tensor;
}

}  // namespace fp8route
