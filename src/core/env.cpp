#include "fp8route/tuning/env.h"

#include <cmath>
#include <cstdlib>

#include "fp8route/error.h"

namespace fp8route::env {

const std::vector<Variable>& variables() {
  static const std::vector<Variable> v = {
      {"FP8ROUTE_TABLE", "library", "the routing table file the process-wide router loads (default: routes/h200.json found as FP8ROUTE_DATA_DIR says)"},
      {"FP8ROUTE_GROUPED_TABLE", "library", "the grouped routing table file grouped GEMMs are routed by (default: this GPU's routes/h100-grouped.json or h200-grouped.json, else the other's, found as FP8ROUTE_DATA_DIR says; none: the rule)"},
      {"FP8ROUTE_DATA_DIR", "library", "a folder looked in first for data files (routes/h200.json, shapes/models.json)"},
      {"FP8ROUTE_SOURCE_DIR", "library", "a source tree looked in for data files, after FP8ROUTE_DATA_DIR; the benchmarks' scripts"},
      {"FP8ROUTE_AUTOPROBE", "library", "0 turns automatic probing off (default on)"},
      {"FP8ROUTE_AUTOPROBE_BUDGET", "library", "seconds of automatic probing per process (default 120; 0: cached timings only)"},
      {"FP8ROUTE_AUTOPROBE_CALL_BUDGET", "library", "seconds one scaled_mm call may spend probing a shape the table lacks (default 2; 0: no bound)"},
      {"FP8ROUTE_CACHE_DIR", "library", "the probe cache's folder (default $XDG_CACHE_HOME/fp8route, else $HOME/.cache/fp8route)"},
      {"XDG_CACHE_HOME", "library", "an absolute path: the probe cache is its fp8route folder unless FP8ROUTE_CACHE_DIR is set"},
      {"HOME", "library", "the probe cache is $HOME/.cache/fp8route when neither FP8ROUTE_CACHE_DIR nor XDG_CACHE_HOME is set"},
      {"FP8ROUTE_LOG", "library", "anything but empty or 0: one stderr line per routing decision and probe (default off)"},
      {"FP8ROUTE_PDL", "library", "0 launches kernels without programmatic dependent launch (default on)"},
      {"FP8ROUTE_PYTHON", "cli", "the Python that `fp8route bench --plot` runs (default build/venv's, else python3)"},
      {"FP8ROUTE_FFI_LIB", "python", "the native module the Python package loads (default: the one installed beside it, else the build tree's)"},
      {"FP8ROUTE_PRESET", "python", "the CMake preset whose build tree a source checkout's package loads (default release)"},
  };
  return v;
}

std::optional<std::string> get(std::string_view name) {
  bool known = false;
  for (const Variable& v : variables()) known = known || v.name == name;
  FP8ROUTE_CHECK_CAT(known, ErrorCategory::invalid_argument,
                     "environment variable " << name << " is read but not listed in core/env.cpp");
  const char* value = std::getenv(std::string(name).c_str());
  if (value == nullptr || *value == '\0') return std::nullopt;
  return std::string(value);
}

std::optional<double> seconds(std::string_view name, std::string* bad) {
  const std::optional<std::string> text = get(name);
  if (!text) return std::nullopt;
  char* end = nullptr;
  const double v = std::strtod(text->c_str(), &end);
  if (end && *end == '\0' && std::isfinite(v) && v >= 0) return v;
  if (bad) *bad = *text;
  return std::nullopt;
}

}  // namespace fp8route::env
