// Routing tables: built from measurements, saved and loaded as JSON (format in README.md,
// "Routing tables"). Loading checks everything the Router relies on, so a bad file fails here, once,
// with the file and the place named, and never as a wrong route later.

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <map>
#include <sstream>
#include <tuple>

#include <nlohmann/json.hpp>

#include "fp8route/error.h"
#include "fp8route/device.h"
#include "fp8route/route.h"

namespace fp8route {

namespace {

using Json = nlohmann::json;
using Key = std::tuple<ScaleKind, DType, int64_t, int64_t>;

constexpr const char* kFormat = "fp8route-routing-table";
constexpr int kFormatVersion = 1;

// Field access with the JSON path in every error: "entries[3].breakpoints[1][0]: expected an integer".
struct Reader {
  const std::string& path;

  [[noreturn]] void fail(const std::string& where, const std::string& what) const {
    FP8ROUTE_FAIL(ErrorCategory::io_error, "routing table " << path << ": " << where << ": " << what);
  }
  const Json& field(const Json& obj, const char* key, const std::string& where) const {
    if (!obj.is_object()) fail(where, "expected an object");
    const auto it = obj.find(key);
    if (it == obj.end()) fail(where, std::string("missing field '") + key + "'");
    return *it;
  }
  const Json& at(const Json& arr, size_t i, const std::string& where) const {
    if (!arr.is_array() || i >= arr.size()) fail(where, "expected an array of at least " + std::to_string(i + 1) + " elements");
    return arr[i];
  }
  std::string str(const Json& v, const std::string& where) const {
    if (!v.is_string()) fail(where, "expected a string, got " + std::string(v.type_name()));
    return v.get<std::string>();
  }
  int64_t positive(const Json& v, const std::string& where) const {
    if (!v.is_number_integer() || v.get<int64_t>() <= 0) fail(where, "expected a positive integer, got " + v.dump());
    return v.get<int64_t>();
  }
  double time_us(const Json& v, const std::string& where) const {
    if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() <= 0)
      fail(where, "expected a positive time in microseconds, got " + v.dump());
    return v.get<double>();
  }
  std::string backend(const Json& v, const std::string& where) const {
    std::string b = str(v, where);
    const std::vector<std::string> known = gemm_backends();
    if (std::find(known.begin(), known.end(), b) == known.end()) fail(where, "unknown backend '" + b + "'");
    return b;
  }
  // Scale kind and dtype parsers throw invalid_argument; a file's content is an io_error.
  template <class F>
  auto parsed(F f, const std::string& where) const {
    try {
      return f();
    } catch (const Error& e) {
      fail(where, e.what());
    }
  }
};

}  // namespace

TableStamp stamp_this_machine() {
  TableStamp s;
  const DeviceInfo& d = device_info(0);
  const LibraryVersions v = library_versions();
  s.gpu = d.name;
  s.sm_count = d.sm_count;
  s.cuda = cuda_version_string(v.cuda_runtime);
  s.cublaslt = cublas_version_string(v.cublaslt);
  s.fp8route = v.fp8route;
  const std::time_t now = std::time(nullptr);
  char date[16];
  std::strftime(date, sizeof date, "%Y-%m-%d", std::gmtime(&now));
  s.date = date;
  return s;
}

RoutingTable build_routing_table(const std::vector<MeasurementRecord>& records, TableStamp stamp) {
  // (scale, out, n, k) -> (m, backend, config) -> fastest time seen
  std::map<Key, std::map<std::tuple<int64_t, std::string, std::string>, double>> groups;
  for (const MeasurementRecord& r : records) {
    auto [it, fresh] = groups[{r.scale, r.out, r.n, r.k}].try_emplace({r.m, r.backend, r.config}, r.us);
    if (!fresh) it->second = std::min(it->second, r.us);
  }
  RoutingTable t{std::move(stamp), {}};
  for (const auto& [key, times] : groups) {
    TableEntry e{std::get<0>(key), std::get<1>(key), std::get<2>(key), std::get<3>(key), {}, {}};
    for (const auto& [mbc, us] : times) e.measured.push_back({std::get<0>(mbc), std::get<1>(mbc), std::get<2>(mbc), us});
    // Ranked within each M, fastest first; ties keep name order so the table is reproducible.
    std::stable_sort(e.measured.begin(), e.measured.end(),
                     [](const Measured& a, const Measured& b) { return a.m != b.m ? a.m < b.m : a.us < b.us; });
    for (size_t i = 0; i < e.measured.size(); ++i) {
      const Measured& best = e.measured[i];
      if (i > 0 && e.measured[i - 1].m == best.m) continue;
      if (!e.breakpoints.empty() && e.breakpoints.back().backend == best.backend &&
          e.breakpoints.back().config == best.config)
        e.breakpoints.back().max_m = best.m;
      else
        e.breakpoints.push_back({best.m, best.backend, best.config});
    }
    t.entries.push_back(std::move(e));
  }
  return t;
}

RoutingTable load_routing_table(const std::string& path) {
  const Reader rd{path};
  std::ifstream in(path, std::ios::binary);
  if (!in) rd.fail("file", "cannot open");
  std::stringstream buf;
  buf << in.rdbuf();
  const std::string text = buf.str();
  if (text.find_first_not_of(" \t\r\n") == std::string::npos) rd.fail("file", "empty");
  Json j;
  try {
    j = Json::parse(text);
  } catch (const Json::parse_error& e) {
    // nlohmann reports a cut-off file as an error at its last byte.
    const bool truncated = e.byte >= text.size();
    rd.fail("byte " + std::to_string(e.byte), std::string(truncated ? "truncated JSON (" : "not JSON (") + e.what() + ")");
  }
  if (rd.str(rd.field(j, "format", "top level"), "format") != kFormat)
    rd.fail("format", std::string("expected \"") + kFormat + "\"");
  const Json& ver = rd.field(j, "version", "top level");
  if (!ver.is_number_integer() || ver.get<int>() != kFormatVersion)
    rd.fail("version", "expected " + std::to_string(kFormatVersion) + ", got " + ver.dump());

  RoutingTable t;
  const Json& s = rd.field(j, "stamp", "top level");
  t.stamp.gpu = rd.str(rd.field(s, "gpu", "stamp"), "stamp.gpu");
  t.stamp.sm_count = static_cast<int>(rd.positive(rd.field(s, "sm_count", "stamp"), "stamp.sm_count"));
  t.stamp.cuda = rd.str(rd.field(s, "cuda", "stamp"), "stamp.cuda");
  t.stamp.cublaslt = rd.str(rd.field(s, "cublaslt", "stamp"), "stamp.cublaslt");
  t.stamp.fp8route = rd.str(rd.field(s, "fp8route", "stamp"), "stamp.fp8route");
  t.stamp.date = rd.str(rd.field(s, "date", "stamp"), "stamp.date");

  const Json& entries = rd.field(j, "entries", "top level");
  if (!entries.is_array()) rd.fail("entries", "expected an array");
  std::map<Key, size_t> seen;
  for (size_t i = 0; i < entries.size(); ++i) {
    const std::string w = "entries[" + std::to_string(i) + "]";
    const Json& je = entries[i];
    TableEntry e;
    const std::string scale = rd.str(rd.field(je, "scale", w), w + ".scale");
    e.scale = rd.parsed([&] { return parse_scale_kind(scale); }, w + ".scale");
    const std::string out = rd.str(rd.field(je, "out", w), w + ".out");
    e.out = rd.parsed([&] { return parse_dtype(out, "out"); }, w + ".out");
    e.n = rd.positive(rd.field(je, "n", w), w + ".n");
    e.k = rd.positive(rd.field(je, "k", w), w + ".k");
    if (auto [it, fresh] = seen.try_emplace({e.scale, e.out, e.n, e.k}, i); !fresh)
      rd.fail(w, "same (scale, out, n, k) as entries[" + std::to_string(it->second) + "]");

    const Json& bps = rd.field(je, "breakpoints", w);
    if (!bps.is_array() || bps.empty()) rd.fail(w + ".breakpoints", "expected a non-empty array");
    for (size_t b = 0; b < bps.size(); ++b) {
      const std::string wb = w + ".breakpoints[" + std::to_string(b) + "]";
      Breakpoint bp{rd.positive(rd.at(bps[b], 0, wb), wb + "[0] (max_m)"),
                    rd.backend(rd.at(bps[b], 1, wb), wb + "[1] (backend)"),
                    rd.str(rd.at(bps[b], 2, wb), wb + "[2] (config)")};
      if (!e.breakpoints.empty() && bp.max_m <= e.breakpoints.back().max_m)
        rd.fail(wb, "max_m " + std::to_string(bp.max_m) + " does not increase (previous " +
                        std::to_string(e.breakpoints.back().max_m) + ")");
      e.breakpoints.push_back(std::move(bp));
    }
    const Json& ms = rd.field(je, "measured", w);
    if (!ms.is_array()) rd.fail(w + ".measured", "expected an array");
    for (size_t r = 0; r < ms.size(); ++r) {
      const std::string wr = w + ".measured[" + std::to_string(r) + "]";
      e.measured.push_back({rd.positive(rd.at(ms[r], 0, wr), wr + "[0] (m)"),
                            rd.backend(rd.at(ms[r], 1, wr), wr + "[1] (backend)"),
                            rd.str(rd.at(ms[r], 2, wr), wr + "[2] (config)"),
                            rd.time_us(rd.at(ms[r], 3, wr), wr + "[3] (us)")});
    }
    t.entries.push_back(std::move(e));
  }
  return t;
}

void save_routing_table(const RoutingTable& t, const std::string& path) {
  // Written by hand rather than Json::dump(2): one breakpoint or measurement per line keeps a
  // re-measured table's diff readable. Times keep full precision so save -> load round-trips.
  std::ostringstream os;
  os.precision(17);
  const auto q = [](const std::string& s) { return Json(s).dump(); };
  const TableStamp& s = t.stamp;
  os << "{\n\"format\": " << q(kFormat) << ",\n\"version\": " << kFormatVersion << ",\n\"stamp\": {\"gpu\": "
     << q(s.gpu) << ", \"sm_count\": " << s.sm_count << ", \"cuda\": " << q(s.cuda) << ", \"cublaslt\": "
     << q(s.cublaslt) << ", \"fp8route\": " << q(s.fp8route) << ", \"date\": " << q(s.date) << "},\n\"entries\": [";
  for (size_t i = 0; i < t.entries.size(); ++i) {
    const TableEntry& e = t.entries[i];
    os << (i ? ",\n" : "\n") << "{\"scale\": " << q(std::string(name(e.scale))) << ", \"out\": "
       << q(std::string(dtype_name(e.out))) << ", \"n\": " << e.n << ", \"k\": " << e.k << ",\n \"breakpoints\": [";
    for (size_t b = 0; b < e.breakpoints.size(); ++b)
      os << (b ? ",\n  " : "\n  ") << "[" << e.breakpoints[b].max_m << ", " << q(e.breakpoints[b].backend) << ", "
         << q(e.breakpoints[b].config) << "]";
    os << "],\n \"measured\": [";
    for (size_t r = 0; r < e.measured.size(); ++r)
      os << (r ? ",\n  " : "\n  ") << "[" << e.measured[r].m << ", " << q(e.measured[r].backend) << ", "
         << q(e.measured[r].config) << ", " << e.measured[r].us << "]";
    os << "]}";
  }
  os << "\n]\n}\n";
  std::ofstream f(path, std::ios::binary);
  f << os.str();
  f.close();
  if (!f) FP8ROUTE_FAIL(ErrorCategory::io_error, "routing table " << path << ": cannot write");
}

std::string default_table_path() {
  if (const char* t = std::getenv("FP8ROUTE_TABLE")) return t;
  const char* src = std::getenv("FP8ROUTE_SOURCE_DIR");
  return std::string(src ? src : FP8ROUTE_SOURCE_DIR) + "/routes/h200.json";
}

}  // namespace fp8route
