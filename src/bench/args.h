#pragma once
// Comma-separated option values of the benchmark programs and the CLI.

#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

namespace fp8route::bench {

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

}  // namespace fp8route::bench
