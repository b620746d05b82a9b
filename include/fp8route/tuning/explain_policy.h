#pragma once
// Where explain's plan comes from, for its two front ends (fp8route explain, fp8route.explain in
// Python). With a GPU, this machine's backends say which candidates run (gemm_supports). Without one
// they cannot answer for this machine, so the plan is the table's as measured on its GPU: every
// candidate the table names counts as runnable.

#include <string>

#include "fp8route/route.h"

namespace fp8route {

struct ExplainPolicy {
  bool as_measured = false;   // no GPU here: the table's choices as measured, this machine's backends unchecked
  std::string no_gpu_reason;  // cuda_unavailable_reason(), when as_measured
  SupportsFn supports;        // gemm_supports, or (as_measured) one that accepts every candidate
};

ExplainPolicy explain_policy();

}  // namespace fp8route
