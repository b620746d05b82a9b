#pragma once
// The measurement records of the tool and the benchmark programs as files: --json (a list of
// objects) and --csv (a header row, then one row per record with the same fields).

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <system_error>
#include <vector>

#include <nlohmann/json.hpp>

#include "fp8route/error.h"

namespace fp8route::tools {

// Error(io_error) naming `path` and `option` when `path` cannot be written: a bad path then fails
// before a long run, not after it. A file created to find out is removed again.
inline void check_writable(const std::string& path, const char* option) {
  std::error_code ec;
  const bool existed = std::filesystem::exists(path, ec);
  const bool ok = std::ofstream(path, std::ios::app).good();
  if (!existed) std::filesystem::remove(path, ec);
  FP8ROUTE_CHECK_CAT(ok, ErrorCategory::io_error, path << ": cannot write (" << option << ")");
}

// One CSV field (RFC 4180): a string quoted when it holds a comma, a quote, CR or LF (quotes
// doubled); a number as JSON writes it (a NaN or infinity empty); a boolean true or false; null or
// a missing field empty.
inline std::string csv_field(const nlohmann::json* v) {
  if (!v || v->is_null()) return "";
  if (v->is_number_float() && !std::isfinite(v->get<double>())) return "";
  if (!v->is_string()) return v->dump();
  const std::string s = v->get<std::string>();
  if (s.find_first_of(",\"\r\n") == std::string::npos) return s;
  std::string q = "\"";
  for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}

// The records (JSON objects) as CSV: a header row of `columns`, then any other key a record has
// (sorted), so that a field added to the JSON records reaches the CSV too; one row per record.
inline std::string csv_text(const nlohmann::json& records, std::vector<std::string> columns) {
  std::set<std::string> extra;
  for (const nlohmann::json& r : records)
    for (const auto& [key, value] : r.items())
      if (std::find(columns.begin(), columns.end(), key) == columns.end()) extra.insert(key);
  columns.insert(columns.end(), extra.begin(), extra.end());
  std::string out;
  for (size_t i = 0; i < columns.size(); ++i) out += (i ? "," : "") + columns[i];
  out += "\n";
  for (const nlohmann::json& r : records) {
    for (size_t i = 0; i < columns.size(); ++i) {
      const auto it = r.find(columns[i]);
      const nlohmann::json v = it == r.end() ? nlohmann::json(nullptr) : *it;
      out += (i ? "," : "") + csv_field(&v);
    }
    out += "\n";
  }
  return out;
}

// The records as indented JSON; text that is not UTF-8 (a label of a shape file) with replacement
// characters, never an error after a run.
inline std::string json_text(const nlohmann::json& records) {
  return records.dump(1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

// `text` written to PATH.partial and renamed over `path`, so that a run cut short (a time limit,
// ^C) leaves the last complete file. Error(io_error) naming `path` and `option`.
inline void write_file_atomically(const std::string& path, const std::string& text, const char* option) {
  const std::string tmp = path + ".partial";
  {
    std::ofstream f(tmp, std::ios::binary);
    FP8ROUTE_CHECK_CAT(f.good(), ErrorCategory::io_error, path << ": cannot write (" << option << ")");
    f << text;
    FP8ROUTE_CHECK_CAT(f.good(), ErrorCategory::io_error, path << ": writing failed (" << option << ")");
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  FP8ROUTE_CHECK_CAT(!ec, ErrorCategory::io_error, path << ": cannot write (" << option << "): " << ec.message());
}

}  // namespace fp8route::tools
