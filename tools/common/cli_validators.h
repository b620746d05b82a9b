#pragma once
// CLI11 checks of comma-separated option values shared by the tool and the benchmark programs: a bad
// value fails when parsed, with CLI11's message naming the option (exit 2, exit_codes.h).

#include <CLI/CLI.hpp>

#include <algorithm>
#include <string>
#include <vector>

#include "common/args.h"

namespace fp8route::tools {

// A comma-separated list of at least one name, each one of `allowed`.
inline CLI::Validator name_list(const std::vector<std::string>& allowed) {
  std::string names;
  for (const std::string& a : allowed) names += (names.empty() ? "" : ", ") + a;
  return CLI::Validator(
      [allowed, names](std::string& s) -> std::string {
        const std::vector<std::string> got = parse_names(s);
        if (got.empty()) return "expected one or more of " + names + ", got '" + s + "'";
        for (const std::string& g : got)
          if (std::find(allowed.begin(), allowed.end(), g) == allowed.end())
            return "unknown '" + g + "' (expected " + names + ", comma-separated)";
        return "";
      },
      "NAME[,NAME...]");
}

}  // namespace fp8route::tools
