#pragma once
// How a scaled FP8 GEMM's operands are scaled (docs/numerics.md, GEMM).

#include <cstdint>
#include <string_view>

namespace fp8route {

// tensor: one fp32 scale per operand. row: per-token [M] x per-channel [N] (either may be a scalar).
// block: 1x128 activation blocks [ceil(K/128), align(M, 4)] x 128x128 weight blocks
// [ceil(N/128), ceil(K/128)].
enum class ScaleKind : uint8_t { tensor, row, block };

inline constexpr int kScaleBlock = 128;

std::string_view name(ScaleKind k);
ScaleKind parse_scale_kind(std::string_view s);

}  // namespace fp8route
