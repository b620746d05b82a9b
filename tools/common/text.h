#pragma once
// Plain-text output of the tool and the benchmark programs: every printed line fits kWidth columns
// (docs/cli.md).

#include <cstdarg>
#include <cstddef>
#include <cstdio>
#include <sstream>
#include <string>

namespace fp8route::tools {

inline constexpr size_t kWidth = 120;

// printf into a std::string.
inline std::string strf(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
inline std::string strf(const char* fmt, ...) {
  va_list ap, again;
  va_start(ap, fmt);
  va_copy(again, ap);
  const int n = std::vsnprintf(nullptr, 0, fmt, ap);
  va_end(ap);
  std::string s(n > 0 ? size_t(n) : 0, '\0');
  std::vsnprintf(s.data(), s.size() + 1, fmt, again);
  va_end(again);
  return s;
}

// A paragraph wrapped between words at kWidth columns: its first line indented by `indent`, the
// continuation lines by `indent` + 2.
inline void print_wrapped(const std::string& text, size_t indent = 0) {
  std::istringstream words(text);
  const std::string next(indent + 2, ' ');
  std::string line(indent, ' ');
  bool fresh = true;  // nothing on the line but its indent
  for (std::string w; words >> w;) {
    if (!fresh && line.size() + 1 + w.size() > kWidth) {
      std::printf("%s\n", line.c_str());
      line = next, fresh = true;
    }
    line += (fresh ? "" : " ") + w;
    fresh = false;
  }
  if (!fresh) std::printf("%s\n", line.c_str());
}

}  // namespace fp8route::tools
