#pragma once
// Comma-separated option values of the benchmark programs and the CLI.

#include <cstdint>
#include <exception>
#include <sstream>
#include <string>
#include <vector>

#include "fp8route/error.h"
#include "fp8route/tuning/backends.h"

namespace fp8route::tools {

inline std::vector<std::string> parse_names(const std::string& s) {
  std::vector<std::string> v;
  std::stringstream ss(s);
  for (std::string tok; std::getline(ss, tok, ',');)
    if (!tok.empty()) v.push_back(tok);
  return v;
}

inline std::vector<int64_t> parse_list(const std::string& s) {
  std::vector<int64_t> v;
  for (const std::string& tok : parse_names(s)) v.push_back(std::stoll(tok));
  return v;
}

// Why s is not a comma-separated list of whole integers in [lo, hi], each read at full width (a TP
// degree of 2^32 narrowed to int would be 0, and divided by): the first bad token; "" when none is.
inline std::string int_list_error(const std::string& s, int64_t lo, int64_t hi) {
  for (const std::string& tok : parse_names(s)) {
    size_t used = 0;
    long long v = 0;
    try {
      v = std::stoll(tok, &used);
    } catch (const std::exception&) {  // not an integer, or beyond 64 bits
      used = 0;
    }
    if (used != tok.size() || v < lo || v > hi)
      return "expected comma-separated integers in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got '" +
             tok + "'";
  }
  return "";
}

// `option`'s values (int_list_error's rule, at least one); Error(invalid_argument) naming it.
inline std::vector<int64_t> parse_int_list(const std::string& s, const char* option, int64_t lo = 1,
                                           int64_t hi = INT64_MAX) {
  const std::string why = int_list_error(s, lo, hi);
  FP8ROUTE_CHECK(why.empty(), option << ": " << why);
  const std::vector<int64_t> v = parse_list(s);
  FP8ROUTE_CHECK(!v.empty(), option << ": expected at least one value, got '" << s << "'");
  return v;
}

// The backends the tools time unless told otherwise: every backend of this build but a
// slow_fallback() one (the reference kernel: never a measured routing choice), comma-separated.
inline std::string timed_backends() {
  std::string v;
  for (const tuning::BackendInfo& b : tuning::backends())
    if (!b.slow_fallback) v += (v.empty() ? "" : ",") + b.name;
  return v;
}

}  // namespace fp8route::tools
