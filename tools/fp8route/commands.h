#pragma once
// Subcommands of the fp8route tool. Each returns the process exit code.

#include <cstdint>
#include <string>

namespace fp8route::cli {

struct InfoOptions {
  bool json = false;
};
int run_info(const InfoOptions& opt);

struct ExplainOptions {
  int64_t m = 1, n = 0, k = 0;
  std::string scale = "row", out = "bf16", table, model;
  int tp = 1;
};
int run_explain(const ExplainOptions& opt);

}  // namespace fp8route::cli
