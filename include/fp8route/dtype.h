#pragma once
// Element types fp8route reads and writes.

#include <cstdint>
#include <string>
#include <string_view>

namespace fp8route {

enum class DType : uint8_t { f32, f16, bf16, e4m3, i8, i32 };

// Bytes per element.
int dtype_size(DType t);
// "f32", "f16", "bf16", "e4m3", "i8", "i32".
std::string_view dtype_name(DType t);
// Inverse of dtype_name; also accepts "float32", "float16", "bfloat16", "fp8", "float8_e4m3fn",
// "int8", "int32". Throws Error(invalid_argument) naming `what` on anything else.
DType parse_dtype(std::string_view s, std::string_view what = "dtype");

}  // namespace fp8route
