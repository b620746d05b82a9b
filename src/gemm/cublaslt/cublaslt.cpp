// Placeholder until the cublaslt backend lands: it supports nothing and says so.

#include "gemm/backend.h"

namespace fp8route::gemm {
namespace {
class Placeholder final : public GemmBackend {
 public:
  std::string_view name() const override { return "cublaslt"; }
  const std::vector<std::string>& configs() const override {
    static const std::vector<std::string> c = {"default"};
    return c;
  }
  std::string supports(const GemmProblem&, int) const override { return "not in this build yet"; }
  void run(const GemmProblem&, const GemmOperands&, int, cudaStream_t) const override {}
};
}  // namespace
const GemmBackend& cublaslt_backend() {
  static const Placeholder b;
  return b;
}
}  // namespace fp8route::gemm
