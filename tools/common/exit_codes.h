#pragma once
// Exit codes of the fp8route tool and the benchmark programs (docs/cli.md, Exit codes), and the
// one mapping of an exception to its code and its message on stderr.

#include <cstdio>
#include <cstring>
#include <exception>

#include "fp8route/error.h"

namespace fp8route::tools {

inline constexpr int kExitOk = 0;
// The command ran and something failed: a correctness check, a measurement, a CUDA call, or an
// error that is not an fp8route::Error (a bug, out of host memory).
inline constexpr int kExitFailure = 1;
// Nothing ran, or the command stopped before its work: an option or its value is invalid (option
// parsing included), a file it names cannot be read or written, or it needs a GPU and there is
// none. The message names the argument, the file or what is missing.
inline constexpr int kExitUsage = 2;
// fp8route bench --plot: the measurements were written, the plot was not drawn (no Python or no
// matplotlib).
inline constexpr int kExitPlot = 3;

// A CUDA failure happens while running; every other category is about the request or this machine.
inline int exit_code(const Error& e) {
  return e.category() == ErrorCategory::cuda_error ? kExitFailure : kExitUsage;
}

// body() (returning the exit code), with an escaping exception reported on stderr, prefixed with
// `program` ("fp8route", "gemm_bench"), and mapped to its exit code.
template <class Body>
int run_reporting_errors(const char* program, Body&& body) {
  try {
    return body();
  } catch (const Error& e) {
    // fp8route's messages start "fp8route <category>:"; the tool's own name is not repeated.
    const bool named = std::strncmp(e.what(), program, std::strlen(program)) == 0;
    std::fprintf(stderr, "%s%s%s\n", named ? "" : program, named ? "" : ": ", e.what());
    return exit_code(e);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: unexpected error: %s\n", program, e.what());
    return kExitFailure;
  }
}

}  // namespace fp8route::tools
