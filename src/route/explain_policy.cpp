#include "fp8route/tuning/explain_policy.h"

#include "fp8route/device.h"
#include "fp8route/gemm.h"

namespace fp8route {

ExplainPolicy explain_policy() {
  ExplainPolicy policy;
  if (cuda_device_count() > 0) {
    policy.supports = gemm_supports;
    return policy;
  }
  policy.as_measured = true;
  policy.no_gpu_reason = cuda_unavailable_reason();
  policy.supports = [](std::string_view, std::string_view, const GemmProblem&) { return std::string(); };
  return policy;
}

}  // namespace fp8route
