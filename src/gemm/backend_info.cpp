// fp8route/tuning/backends.h: the registry (backend.h) as tools see it.

#include "fp8route/tuning/backends.h"

#include "gemm/backend.h"

namespace fp8route::tuning {

namespace {
BackendInfo info_of(const gemm::GemmBackend& b) {
  return {std::string(b.name()), b.configs(), b.slow_fallback(), b.ranks_configs_per_problem()};
}
}  // namespace

std::vector<BackendInfo> backends() {
  std::vector<BackendInfo> out;
  for (const gemm::GemmBackend* b : gemm::all_backends()) out.push_back(info_of(*b));
  return out;
}

BackendInfo backend(std::string_view name) { return info_of(gemm::find_backend(name)); }

std::vector<std::string> probe_configs(std::string_view backend, const GemmProblem& p) {
  const gemm::GemmBackend& b = gemm::find_backend(backend);
  std::vector<std::string> out;
  for (int c : b.probe_configs(p)) out.push_back(b.configs()[c]);
  return out;
}

int m_tile(std::string_view backend, std::string_view config) { return gemm::config_m_tile(backend, config); }

}  // namespace fp8route::tuning
