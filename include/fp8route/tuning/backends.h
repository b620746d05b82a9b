#pragma once
// The GEMM backends of this build as tools see them (fp8route/tuning/: the tier for programs that
// measure and tune): names, configs and the properties that decide what a tool times.

#include <string>
#include <string_view>
#include <vector>

#include "fp8route/gemm.h"

namespace fp8route::tuning {

struct BackendInfo {
  std::string name;                  // the routing name ("cublaslt", "wgmma", ...)
  std::vector<std::string> configs;  // in the backend's order
  // The reference kernel: runs every valid problem, tens of times slower; never a measured
  // routing choice, so tools leave it out of what they time unless asked.
  bool slow_fallback = false;
  // Its configs are ranks the backend gives each problem (cuBLASLt's "heuristicN"), not fixed
  // kernels: a win at one shape does not carry to another.
  bool ranks_configs_per_problem = false;
};

// Every backend of this build, in the registry's order.
std::vector<BackendInfo> backends();
// One by name; throws Error(invalid_argument) listing the names when unknown.
BackendInfo backend(std::string_view name);
// The configs `backend` asks a probe to time for p (beyond the table's guesses), by name.
std::vector<std::string> probe_configs(std::string_view backend, const GemmProblem& p);
// A config's M tile (rows of a per-M tile; 0 for one this build lacks).
int m_tile(std::string_view backend, std::string_view config);

}  // namespace fp8route::tuning
