#pragma once
// CPU reference of the grouped scaled GEMM (docs/moe.md), written from docs/moe.md and the dense
// reference (ref::scaled_mm), independent of the GPU code. Slow and simple on purpose.

#include <cstdint>
#include <span>
#include <vector>

#include "fp8route/dtype.h"
#include "fp8route/moe.h"
#include "fp8route/quant_layout.h"
#include "fp8route/scale_kind.h"

namespace fp8route::ref {

struct GroupedProblemRef {
  GroupedForm form = GroupedForm::contiguous;
  int64_t experts = 0, rows = 0, n = 0, k = 0;  // rows: M_total or M_max
  ScaleKind scale = ScaleKind::block;
  DType out = DType::bf16;
  std::span<const uint8_t> a;       // [rows, K] or [E, rows, K] E4M3 codes
  std::span<const uint8_t> b;       // [E, N, K]
  std::span<const int32_t> groups;  // offsets [E + 1] or [E] (ends), or masked_m [E]
  // scale_a as moe.h's table gives it: tensor 1 or E floats; row rows or E * rows floats; block the
  // scale buffer of group quant (f32, or int32 words of packed UE8M0) in layout sa_layout.
  std::span<const float> sa_f32;
  std::span<const int32_t> sa_packed;  // block with ue8m0_packed storage (sa_f32 empty)
  ScaleLayout sa_layout = ScaleLayout::col_major_tma;
  std::span<const float> sb;  // tensor [E]; row [E, N]; block [E, ceil(N/128), K/128]
};

// Expert e's rows [start, start + count) after the clamping of moe.h (in its slab, for masked).
struct GroupRows {
  int64_t start = 0, count = 0;
};
std::vector<GroupRows> grouped_rows(GroupedForm form, std::span<const int32_t> groups, int64_t experts,
                                    int64_t rows);

// out as floats in out's shape ([rows, N] or [E, rows, N]): each expert's rows computed by
// ref::scaled_mm on them alone (fp64, one rounding to p.out); rows of no group are NaN (a kernel
// must leave them as they were).
std::vector<float> grouped_scaled_mm(const GroupedProblemRef& p);

// Block scale_a of row t (within batch be) for K block kb, decoded to fp32 (packed UE8M0: 2^(e-127)).
float grouped_block_scale_a(const GroupedProblemRef& p, int64_t be, int64_t t, int64_t kb);

}  // namespace fp8route::ref
