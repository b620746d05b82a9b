// Routing tables: built from measurements, saved and loaded as JSON (format in docs/routing.md,
// "Routing tables"). Loading checks everything the Router relies on, so a bad file fails here, once,
// with the file and the place named, and never as a wrong route later.

#include <dlfcn.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <tuple>

#include <nlohmann/json.hpp>

#include "fp8route/tuning/env.h"
#include "fp8route/tuning/json_reader.h"
#include "fp8route/error.h"
#include "fp8route/route.h"
#include "fp8route/tuning/data_files.h"
#include "fp8route/tuning/record_reader.h"
#include "fp8route/tuning/stamp_json.h"

namespace fp8route {

namespace {

using Json = nlohmann::json;
using Key = std::tuple<ScaleKind, DType, int64_t, int64_t>;
using json_reader::element;
using json_reader::kMaxDim;
using json_reader::member;

constexpr const char* kFormat = "fp8route-routing-table";
constexpr int kFormatVersion = 1;

}  // namespace

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
  if (path.empty()) FP8ROUTE_FAIL(ErrorCategory::io_error, "routing table: " << data_file_not_found("routes/h200.json")
                                                          << "; FP8ROUTE_TABLE names one");
  // Field access with the JSON path in every error: "entries[3].breakpoints[1][0] (max_m): expected ...".
  const std::vector<std::string> known = gemm_backends();
  const RecordReader rd("routing table " + path, known);
  const Json j = rd.document_file(path, kFormat, kFormatVersion);

  RoutingTable t;
  t.stamp = rd.stamp(rd.field(j, "stamp", ""));

  const Json& entries = rd.array(rd.field(j, "entries", ""), "entries");
  std::map<Key, size_t> seen;
  for (size_t i = 0; i < entries.size(); ++i) {
    const std::string w = element("entries", i);
    const Json& je = rd.object(entries[i], w);
    TableEntry e;
    const std::string scale = rd.str(rd.field(je, "scale", w), member(w, "scale"));
    e.scale = rd.parsed([&] { return parse_scale_kind(scale); }, member(w, "scale"));
    e.out = rd.out(rd.field(je, "out", w), member(w, "out"));
    e.n = rd.integer(rd.field(je, "n", w), member(w, "n"), 1, kMaxDim);
    e.k = rd.integer(rd.field(je, "k", w), member(w, "k"), 1, kMaxDim);
    if (auto [it, fresh] = seen.try_emplace({e.scale, e.out, e.n, e.k}, i); !fresh)
      rd.fail(w, "same (scale, out, n, k) as entries[" + std::to_string(it->second) + "]");

    const std::string wbs = member(w, "breakpoints");
    const Json& bps = rd.array(rd.field(je, "breakpoints", w), wbs, 1);
    for (size_t b = 0; b < bps.size(); ++b) {
      const std::string wb = element(wbs, b);
      Breakpoint bp{rd.integer(rd.at(bps[b], 0, wb), wb + "[0] (max_m)", 1, kMaxDim),
                    rd.backend(rd.at(bps[b], 1, wb), wb + "[1] (backend)"),
                    rd.str(rd.at(bps[b], 2, wb), wb + "[2] (config)", true)};
      if (!e.breakpoints.empty() && bp.max_m <= e.breakpoints.back().max_m)
        rd.fail(wb, "max_m " + std::to_string(bp.max_m) + " does not increase (previous " +
                        std::to_string(e.breakpoints.back().max_m) + ")");
      e.breakpoints.push_back(std::move(bp));
    }
    // The router ranks an entry's candidates from these (a breakpoint alone has no runner-up).
    const std::string wms = member(w, "measured");
    const Json& ms = rd.field(je, "measured", w);
    if (!ms.is_array() || ms.empty()) rd.fail(wms, "expected a non-empty array, got " + json_reader::describe(ms));
    std::map<std::tuple<int64_t, std::string, std::string>, size_t> measured_at;
    for (size_t r = 0; r < ms.size(); ++r) {
      const std::string wr = element(wms, r);
      Measured m{rd.integer(rd.at(ms[r], 0, wr), wr + "[0] (m)", 1, kMaxDim),
                 rd.backend(rd.at(ms[r], 1, wr), wr + "[1] (backend)"),
                 rd.str(rd.at(ms[r], 2, wr), wr + "[2] (config)", true),
                 rd.positive(rd.at(ms[r], 3, wr), wr + "[3] (us)", "a positive time in microseconds")};
      if (auto [it, fresh] = measured_at.try_emplace({m.m, m.backend, m.config}, r); !fresh)
        rd.fail(wr, "same (m, backend, config) as " + element(wms, it->second));
      e.measured.push_back(std::move(m));
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
  os << table_head(kFormat, kFormatVersion, t.stamp);
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
  write_text_file(path, os.str(), "routing table");
}

namespace {
// Any function of this library: dladdr names the shared object (or executable) it is in.
void locate_this_module() {}
}  // namespace

std::vector<std::string> data_file_candidates(const std::string& relative) {
  std::vector<std::string> out;
  const auto add = [&](const std::filesystem::path& p) {
    const std::string s = p.lexically_normal().string();
    if (std::find(out.begin(), out.end(), s) == out.end()) out.push_back(s);
  };
  if (const auto data = env::get("FP8ROUTE_DATA_DIR")) add(std::filesystem::path(*data) / relative);
  if (const auto src = env::get("FP8ROUTE_SOURCE_DIR")) add(std::filesystem::path(*src) / relative);
  std::vector<std::filesystem::path> dirs;
  std::error_code ec;
  Dl_info info{};
  // For code linked into the executable dladdr gives argv[0], which may be relative (to a folder
  // since left, or found through PATH): only an absolute path is taken; /proc/self/exe names the
  // executable.
  if (dladdr(reinterpret_cast<void*>(&locate_this_module), &info) && info.dli_fname && info.dli_fname[0] == '/') {
    const std::filesystem::path module = std::filesystem::weakly_canonical(info.dli_fname, ec);
    if (!ec) dirs.push_back(module.parent_path());
  }
  if (const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec); !ec)
    dirs.push_back(exe.parent_path());
  for (const std::filesystem::path& d : dirs) add(d / relative);
  for (const std::filesystem::path& d : dirs) add(d.parent_path() / "share" / "fp8route" / relative);
#ifdef FP8ROUTE_INSTALL_DATA_DIR
  add(std::filesystem::path(FP8ROUTE_INSTALL_DATA_DIR) / relative);
#endif
  add(std::filesystem::path(FP8ROUTE_SOURCE_DIR) / relative);
  return out;
}

std::string find_data_file(const std::string& relative) {
  for (const std::string& p : data_file_candidates(relative)) {
    std::error_code ec;
    if (std::filesystem::is_regular_file(p, ec)) return p;
  }
  return "";
}

std::string data_file_not_found(const std::string& relative) {
  std::string s = "no " + relative + " found (looked for";
  const std::vector<std::string> c = data_file_candidates(relative);
  for (size_t i = 0; i < c.size(); ++i) s += (i ? ", " : " ") + c[i];
  return s + ")";
}

std::string default_table_path() {
  if (const auto t = env::get("FP8ROUTE_TABLE")) return *t;
  return find_data_file("routes/h200.json");
}

}  // namespace fp8route
