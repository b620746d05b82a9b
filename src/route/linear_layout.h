#pragma once
// The CPU-side half of a LinearPlan (linear.h), from shapes alone: which backends and scale forms a
// layer runs, and the router slice it routes by. linear_plan.cpp builds every plan from these; the
// tests check them against the full router on a machine without a GPU.

#include <cstdint>

#include "fp8route/linear.h"
#include "fp8route/router.h"

namespace fp8route {

// The layout of a layer (which backends, which forms), from shapes alone. `supports` answers for
// this GPU (gemm_supports by default).
LinearLayout plan_linear_layout(int64_t n, int64_t k, ScaleKind act, int64_t weight_scale_numel,
                                DType out, bool bias, const SupportsFn& supports = gemm_supports);

// A router over the entries of `full` that route (layout's GEMM kind, out, N, K) for any M (the
// exact entry, or every entry the nearest-entry rule can consult), restricted to the layout's
// backends and the scale form each reads. For every M its select() equals full's select() of the
// same problem under the same restriction (tested).
Router plan_router(const Router& full, const LinearLayout& layout, SupportsFn supports = gemm_supports);

}  // namespace fp8route
