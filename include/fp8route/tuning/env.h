#pragma once
// Every environment variable fp8route reads, in one place: the library, the command-line tool and
// the benchmarks read them through get(), never through getenv directly, and each is documented in
// variables() and in docs/environment.md (a test checks that the three agree and that nothing else
// in the tree calls getenv). The Python package's own (FP8ROUTE_FFI_LIB, FP8ROUTE_PRESET) are listed
// too, marked as such.

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace fp8route::env {

struct Variable {
  std::string_view name;
  std::string_view reader;   // "library", "cli" (the fp8route tool and benchmarks) or "python"
  std::string_view meaning;  // one line, with the default
};

// Every variable, in the order docs/environment.md lists them.
const std::vector<Variable>& variables();

// The value of `name` when it is set and not empty; nullopt otherwise. `name` must be one of
// variables() (throws Error(internal) otherwise: a variable read but not documented).
std::optional<std::string> get(std::string_view name);

// Seconds >= 0 from `name`: nullopt when unset or empty; `bad` set to the text when it is not a
// finite number >= 0 (the caller keeps its default and says so).
std::optional<double> seconds(std::string_view name, std::string* bad);

}  // namespace fp8route::env
