#pragma once
// Subcommands of the fp8route tool. Each returns the process exit code.

namespace fp8route::cli {

struct InfoOptions {
  bool json = false;
};
int run_info(const InfoOptions& opt);

}  // namespace fp8route::cli
