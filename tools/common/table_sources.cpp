#include "common/table_sources.h"

#include <zlib.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <tuple>

#include <nlohmann/json.hpp>

#include "fp8route/tuning/json_reader.h"
#include "fp8route/error.h"
#include "fp8route/tuning/backends.h"
#include "fp8route/tuning/record_reader.h"
#include "fp8route/tuning/tune_raw.h"

namespace fp8route::tools {

namespace {

using Json = nlohmann::json;
using json_reader::element;
using json_reader::kMaxDim;
using json_reader::member;

constexpr const char* kFormat = "fp8route-table-sources";
constexpr int kFormatVersion = 1;
// As tune's raw file: no GEMM takes days.
constexpr double kMaxUs = 1e12;

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// The whole file, gunzipped when it is gzip data (zlib reads other files as they are).
std::string read_file(const std::string& path) {
  const std::string file = json_reader::printable(path, 1000);
  gzFile f = gzopen(path.c_str(), "rb");
  FP8ROUTE_CHECK_CAT(f != nullptr, ErrorCategory::io_error, file << ": cannot open");
  std::string out;
  char buf[1 << 16];
  int n = 0;
  while ((n = gzread(f, buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
  int err = Z_OK;
  const std::string msg = gzerror(f, &err);
  gzclose(f);
  // A cut-off gzip stream ends with Z_BUF_ERROR ("unexpected end of file"), not with n < 0.
  FP8ROUTE_CHECK_CAT(n == 0 && (err == Z_OK || err == Z_STREAM_END), ErrorCategory::io_error,
                     file << ": cannot read (" << json_reader::printable(msg) << ")");
  return out;
}

// gemm_bench --json: an array of {"model", "layer", "tp", "m", "n", "k", "scale", "out", "bias",
// "backend", "config", "us", ...}, one per (problem, backend, config) timed.
std::vector<MeasurementRecord> read_bench_array(const std::string& text, const std::string& path) {
  const std::vector<std::string> known = gemm_backends();
  const RecordReader rd(path, known);
  const Json j = rd.parse(text);
  rd.array(j, "");
  std::vector<MeasurementRecord> out;
  for (size_t i = 0; i < j.size(); ++i) {
    const std::string w = element("", i);
    const Json& r = rd.object(j[i], w);
    if (rd.str(rd.field(r, "backend", w), member(w, "backend")) == "floor") continue;  // gemm_bench --floor
    if (const Json* bias = rd.optional_field(r, "bias", w); bias && rd.boolean(*bias, member(w, "bias"))) continue;
    const std::string scale = rd.str(rd.field(r, "scale", w), member(w, "scale"));
    MeasurementRecord m;
    m.scale = rd.parsed([&] { return parse_scale_kind(scale); }, member(w, "scale"));
    m.out = rd.out(rd.field(r, "out", w), member(w, "out"));
    m.n = rd.integer(rd.field(r, "n", w), member(w, "n"), 1, kMaxDim);
    m.k = rd.integer(rd.field(r, "k", w), member(w, "k"), 1, kMaxDim);
    m.m = rd.integer(rd.field(r, "m", w), member(w, "m"), 1, kMaxDim);
    m.backend = rd.backend(rd.field(r, "backend", w), member(w, "backend"));
    m.config = rd.str(rd.field(r, "config", w), member(w, "config"), true);
    const Json& us = rd.field(r, "us", w);
    m.us = rd.positive(us, member(w, "us"), "a positive time in microseconds");
    if (m.us > kMaxUs) rd.fail(member(w, "us"), "expected a time of at most 1e12 microseconds, got " + json_reader::describe(us));
    out.push_back(std::move(m));
  }
  return out;
}

bool slow_fallback(const std::string& backend) {
  for (const tuning::BackendInfo& b : tuning::backends())
    if (b.name == backend) return b.slow_fallback;
  return false;
}

// us rounded to `decimals` decimals, correctly (printf rounds the exact binary value, ties to even).
double round_to(double us, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, us);
  return std::strtod(buf, nullptr);
}

// The shortest decimals that read back as v, as Python's repr writes them (fixed notation from 1e-4
// to 1e16, with ".0" when whole): the records file stays what it was when a script wrote it.
std::string shortest(double v) {
  char buf[64];
  const double a = std::abs(v);
  const bool sci = a != 0 && (a < 1e-4 || a >= 1e16);
  const auto r = std::to_chars(buf, buf + sizeof buf, v, sci ? std::chars_format::scientific : std::chars_format::fixed);
  std::string s(buf, r.ptr);
  if (!sci && s.find('.') == std::string::npos) s += ".0";
  return s;
}

}  // namespace

TableSources load_table_sources(const std::string& path) {
  const std::vector<std::string> known = gemm_backends();
  const RecordReader rd("table sources " + path, known);
  std::ifstream in(path, std::ios::binary);
  if (!in) rd.fail("file", "cannot open");
  std::stringstream buf;
  buf << in.rdbuf();
  const Json j = rd.parse(buf.str());
  rd.object(j, "");
  if (rd.str(rd.field(j, "format", ""), "format") != kFormat) rd.fail("format", std::string("expected \"") + kFormat + "\"");
  rd.integer(rd.field(j, "version", ""), "version", kFormatVersion, kFormatVersion);
  TableSources s;
  s.path = path;
  s.stamp = rd.stamp(rd.field(j, "stamp", ""));
  if (const Json* d = rd.optional_field(j, "us_decimals", ""))
    s.us_decimals = static_cast<int>(rd.integer(*d, "us_decimals", 0, 12));
  const std::filesystem::path base = std::filesystem::path(path).parent_path();
  std::map<std::string, std::string> seen;  // resolved path -> where the manifest names it
  const Json& groups = rd.array(rd.field(j, "groups", ""), "groups", 1);
  for (size_t g = 0; g < groups.size(); ++g) {
    const std::string wg = element("groups", g);
    const Json& group = rd.object(groups[g], wg);
    if (const Json* about = rd.optional_field(group, "about", wg)) rd.str(*about, member(wg, "about"));
    const std::string wfs = member(wg, "files");
    const Json& files = rd.array(rd.field(group, "files", wg), wfs, 1);
    s.groups.emplace_back();
    for (size_t f = 0; f < files.size(); ++f) {
      const std::string wf = element(wfs, f);
      const std::filesystem::path named = rd.str(files[f], wf, true);
      const std::string resolved = (named.is_absolute() ? named : base / named).lexically_normal().string();
      if (auto [it, fresh] = seen.try_emplace(resolved, wf); !fresh) rd.fail(wf, "the same file as " + it->second);
      s.groups.back().push_back(resolved);
    }
  }
  return s;
}

std::vector<MeasurementRecord> read_measurement_file(const std::string& path) {
  const std::string name = ends_with(path, ".gz") ? path.substr(0, path.size() - 3) : path;
  std::vector<MeasurementRecord> records;
  if (ends_with(name, ".jsonl")) {
    std::istringstream in(read_file(path));
    records = read_tune_raw(in, path).records;
  } else if (ends_with(name, ".json")) {
    records = read_bench_array(read_file(path), path);
  } else {
    FP8ROUTE_FAIL(ErrorCategory::io_error, json_reader::printable(path, 1000)
                                               << ": expected a tune raw file (.jsonl) or a gemm_bench JSON array "
                                                  "(.json), either may end in .gz");
  }
  std::erase_if(records, [](const MeasurementRecord& r) { return slow_fallback(r.backend); });
  return records;
}

GatheredRecords gather_records(const TableSources& sources) {
  // Names, not enums, order the keys: the records file lists them in that order.
  using Problem = std::tuple<std::string, std::string, int64_t, int64_t, int64_t>;
  using Key = std::tuple<Problem, std::string, std::string>;
  std::map<Key, MeasurementRecord> all;
  std::set<Problem> measured;  // problems of the groups so far
  GatheredRecords out;
  for (size_t g = 0; g < sources.groups.size(); ++g) {
    std::map<Key, MeasurementRecord> group;
    for (const std::string& file : sources.groups[g]) {
      for (MeasurementRecord& r : read_measurement_file(file)) {
        const Key key{{std::string(name(r.scale)), std::string(dtype_name(r.out)), r.n, r.k, r.m}, r.backend, r.config};
        auto [it, fresh] = group.try_emplace(key, r);
        if (!fresh) it->second.us = std::min(it->second.us, r.us);
      }
      ++out.files;
    }
    std::set<Problem> added;
    for (auto& [key, r] : group) {
      const Problem& p = std::get<0>(key);
      if (measured.count(p)) continue;
      added.insert(p);
      all.emplace(key, std::move(r));
      if (g > 0) ++out.later;
    }
    if (g > 0) out.later_problems += added.size();
    measured.insert(added.begin(), added.end());
  }
  for (auto& [key, r] : all) {
    if (sources.us_decimals >= 0) {
      const double us = r.us;
      r.us = round_to(us, sources.us_decimals);
      FP8ROUTE_CHECK_CAT(r.us > 0, ErrorCategory::io_error,
                         sources.path << ": us_decimals " << sources.us_decimals << " rounds " << shortest(us) << " us ("
                                      << r.backend << "/" << r.config << ") to 0");
    }
    out.records.push_back(std::move(r));
  }
  return out;
}

std::string records_json(const std::vector<MeasurementRecord>& records) {
  const auto q = [](std::string_view s) { return Json(s).dump(-1, ' ', true); };
  std::string s = "[\n";
  for (size_t i = 0; i < records.size(); ++i) {
    const MeasurementRecord& r = records[i];
    s += (i ? ",\n[" : "[") + q(name(r.scale)) + ", " + q(dtype_name(r.out)) + ", " + std::to_string(r.n) + ", " +
         std::to_string(r.k) + ", " + std::to_string(r.m) + ", " + q(r.backend) + ", " + q(r.config) + ", " +
         shortest(r.us) + "]";
  }
  return s + "\n]\n";
}

std::vector<MeasurementRecord> read_records_json(const std::string& path) {
  std::ifstream f(path);
  FP8ROUTE_CHECK_CAT(f.good(), ErrorCategory::io_error, path << ": cannot be read");
  const Json j = Json::parse(f);
  std::vector<MeasurementRecord> out;
  for (const auto& r : j)
    out.push_back({parse_scale_kind(r[0].get<std::string>()), parse_dtype(r[1].get<std::string>()),
                   r[2].get<int64_t>(), r[3].get<int64_t>(), r[4].get<int64_t>(), r[5].get<std::string>(),
                   r[6].get<std::string>(), r[7].get<double>()});
  return out;
}

}  // namespace fp8route::tools
