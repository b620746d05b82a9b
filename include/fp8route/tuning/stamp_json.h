#pragma once
// TableStamp -> nlohmann::json, for the JSON written line by line (tune's raw file, the Python
// module's table_info); and the routing tables' written form: the opening lines (format, version,
// the stamp's fields in their documented order) and the file written whole. Reading is checked
// field by field where it happens (record_reader.h).

#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "fp8route/error.h"
#include "fp8route/route.h"

namespace fp8route {

inline void to_json(nlohmann::json& j, const TableStamp& s) {
  j = {{"gpu", s.gpu}, {"sm_count", s.sm_count}, {"cuda", s.cuda}, {"cublaslt", s.cublaslt},
       {"fp8route", s.fp8route}, {"date", s.date}};
}

// {"gpu": "...", "sm_count": N, "cuda": "...", "cublaslt": "...", "fp8route": "...", "date": "..."}
inline std::string stamp_object(const TableStamp& s) {
  const auto q = [](const std::string& v) { return nlohmann::json(v).dump(); };
  std::ostringstream os;
  os << "{\"gpu\": " << q(s.gpu) << ", \"sm_count\": " << s.sm_count << ", \"cuda\": " << q(s.cuda)
     << ", \"cublaslt\": " << q(s.cublaslt) << ", \"fp8route\": " << q(s.fp8route) << ", \"date\": " << q(s.date)
     << "}";
  return os.str();
}

// {"format": ..., "version": ..., "stamp": {...}, "entries": [   (one key a line; the entries follow)
inline std::string table_head(const char* format, int64_t version, const TableStamp& stamp) {
  return "{\n\"format\": " + nlohmann::json(format).dump() + ",\n\"version\": " + std::to_string(version) +
         ",\n\"stamp\": " + stamp_object(stamp) + ",\n\"entries\": [";
}

// Writes text to path; Error(io_error) "<what> <path>: cannot write" when that fails.
inline void write_text_file(const std::string& path, const std::string& text, const std::string& what) {
  std::ofstream f(path, std::ios::binary);
  f << text;
  f.close();
  if (!f) FP8ROUTE_FAIL(ErrorCategory::io_error, what << " " << path << ": cannot write");
}

}  // namespace fp8route
