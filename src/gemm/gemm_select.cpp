// The default backend choice until measured routing (the router issue) replaces it: a short
// ordered list of candidates per scale kind; the first one that supports the problem runs. The
// reference backend, which supports every valid problem, ends every list.

#include <string>

#include "fp8route/error.h"
#include "fp8route/gemm.h"
#include "gemm/backend.h"

namespace fp8route {

GemmChoice gemm_select(const GemmProblem& p) {
  struct Candidate {
    const char* backend;
    const char* config;  // "" = the backend's first config
    const char* why;
  };
  // cuBLASLt first: the strongest general backend in the H200 calibration (DEVICE.md).
  static constexpr Candidate kOrder[] = {
      {"cublaslt", "", "cuBLASLt: the strongest general backend (DEVICE.md calibration)"},
      {"cutlass_sm90", "", "CUTLASS SM90: cuBLASLt cannot run this problem"},
      {"reference", "", "reference: no fast backend supports this problem"},
  };
  std::string skipped;
  for (const Candidate& c : kOrder) {
    const std::string why = gemm_supports(c.backend, c.config, p);
    if (why.empty()) return {c.backend, gemm_configs(c.backend)[0], c.why + (skipped.empty() ? "" : " [" + skipped + "]")};
    skipped += (skipped.empty() ? "" : "; ") + std::string(c.backend) + ": " + why;
  }
  FP8ROUTE_FAIL(ErrorCategory::unsupported, "no backend can run " << to_string(p) << ": " << skipped);
}

}  // namespace fp8route
