// Measured routing on the recorded H200 measurements (routes/h200-measurements.json, gathered by
// `fp8route table build` from the runs routes/h200.sources.json names), CPU only. Without a GPU,
// supports() can only give its static answers, so the routing checks ask "was this (backend,
// config) measured on the H200 for this problem?" instead: the bench ran exactly what the H200
// supports.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <tuple>

#include <nlohmann/json.hpp>

#include "common/shapes.h"
#include "common/table_sources.h"
#include "fp8route/device.h"
#include "fp8route/error.h"
#include "fp8route/route.h"
#include "fp8route/version.h"
#include "gemm/backend.h"
#include "fp8route/tuning/tune_raw.h"

namespace fp8route {
namespace {

std::string source_dir() {
  const char* env = std::getenv("FP8ROUTE_SOURCE_DIR");
  return env ? env : FP8ROUTE_SOURCE_DIR;
}

const std::vector<MeasurementRecord>& h200_records() {
  static const std::vector<MeasurementRecord> records =
      tools::read_records_json(source_dir() + "/routes/h200-measurements.json");
  return records;
}

// The stamp of routes/h200.json (docs/routing.md): the H200 its measurements were made on.
TableStamp h200_stamp() { return {"NVIDIA H200", 132, "13.0", "13.1", FP8ROUTE_VERSION, "2026-11-30"}; }

using Point = std::tuple<ScaleKind, DType, int64_t, int64_t, int64_t>;  // scale, out, n, k, m
using Times = std::map<std::pair<std::string, std::string>, double>;    // (backend, config) -> us

std::map<Point, Times> points_of(const std::vector<MeasurementRecord>& records) {
  std::map<Point, Times> out;
  for (const MeasurementRecord& r : records) {
    auto [it, fresh] = out[{r.scale, r.out, r.n, r.k, r.m}].try_emplace({r.backend, r.config}, r.us);
    if (!fresh) it->second = std::min(it->second, r.us);
  }
  return out;
}

// supports() as the H200 answered it: a (backend, config) runs a problem iff it was measured on it.
SupportsFn measured_on_h200() {
  // Built once: tests make Routers per table entry with it (a new map of ~80k records each time took
  // most of the suite's minute).
  static const std::shared_ptr<const std::map<Point, Times>> all =
      std::make_shared<const std::map<Point, Times>>(points_of(h200_records()));
  return [points = all](std::string_view backend, std::string_view config, const GemmProblem& p) -> std::string {
    const auto it = points->find({p.scale, p.out, p.n, p.k, p.m});
    if (it != points->end() && it->second.count({std::string(backend), std::string(config)})) return "";
    return "not measured on the H200 for this problem";
  };
}

double best_of(const Times& t) {
  double best = INFINITY;
  for (const auto& [bc, us] : t) best = std::min(best, us);
  return best;
}

std::string file_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream buf;
  buf << f.rdbuf();
  return buf.str();
}

// The shipped table and the records the tests here route on are what its manifest builds, byte for
// byte (the files are large: a mismatch is reported by name, not diffed).
TEST(Route, ShippedTableIsBuiltFromItsManifest) {
  const std::string routes = source_dir() + "/routes/";
  const std::string rebuild = "fp8route table build " + routes + "h200.sources.json -o " + routes +
                              "h200.json --records " + routes + "h200-measurements.json";
  const tools::TableSources sources = tools::load_table_sources(routes + "h200.sources.json");
  const tools::GatheredRecords gathered = tools::gather_records(sources);
  EXPECT_TRUE(tools::records_json(gathered.records) == file_text(routes + "h200-measurements.json"))
      << "routes/h200-measurements.json is not what routes/h200.sources.json gathers: " << rebuild;
  const std::string built = (std::filesystem::temp_directory_path() / "fp8route_test_route_h200_rebuilt.json").string();
  save_routing_table(build_routing_table(gathered.records, sources.stamp), built);
  EXPECT_TRUE(file_text(built) == file_text(routes + "h200.json"))
      << "routes/h200.json is not what routes/h200.sources.json builds: " << rebuild;
}

// The manifest's rules on small files: groups apply in order, each adding only problems no earlier
// group measured; within a group the minimum; gemm_bench's floor rows, records with a bias and the
// reference backend's left out (a problem only the reference timed is still open to later groups);
// times rounded to us_decimals.
TEST(Route, TableSourcesGroupsApplyInOrder) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "fp8route_test_route_sources";
  std::filesystem::create_directories(dir);
  const auto write = [&](const std::string& name, const std::string& text) {
    std::ofstream(dir / name, std::ios::binary) << text;
  };
  const std::string p1 = R"("scale":"row","out":"bf16","n":4096,"k":4096,"m":1)";
  const std::string p2 = R"("scale":"row","out":"bf16","n":4096,"k":4096,"m":2)";
  write("a.raw.jsonl", R"({"stamp":{"gpu":"NVIDIA H200","sm_count":132,"cuda":"13.0","cublaslt":"13.1","fp8route":"0.1.0","date":"2026-11-30"}})"
                       "\n{" + p1 + R"(,"backend":"cublaslt","config":"heuristic","us":10.00004})"
                       "\n{" + p1 + R"(,"backend":"cutlass_sm90","config":"a","us":12})"
                       "\n{\"done\":true," + p1 + "}"
                       "\n{" + p2 + R"(,"backend":"skinny","config":"unfinished","us":1.0})" "\n");
  write("b.json", "[{" + p1 + R"(,"bias":false,"backend":"cublaslt","config":"heuristic","us":9.5},)"
                  "{" + p1 + R"(,"bias":false,"backend":"floor","config":"read","us":1.0},)"
                  "{" + p1 + R"(,"bias":true,"backend":"skinny","config":"b","us":1.0},)"
                  "{" + p2 + R"(,"bias":false,"backend":"reference","config":"simt_64x64","us":900.0}])");
  write("c.json", "[{" + p1 + R"(,"backend":"skinny","config":"c","us":1.0},)"
                  "{" + p2 + R"(,"backend":"cublaslt","config":"heuristic","us":20.123456}])");
  const std::string stamp = R"("stamp": {"gpu": "NVIDIA H200", "sm_count": 132, "cuda": "13.0", "cublaslt": "13.1", "fp8route": "0.1.0", "date": "2026-11-30"})";
  write("m.json", R"({"format": "fp8route-table-sources", "version": 1, )" + stamp +
                      R"(, "us_decimals": 4, "groups": [{"files": ["a.raw.jsonl", "b.json"]}, {"about": "later", "files": ["c.json"]}]})");
  const tools::TableSources sources = tools::load_table_sources((dir / "m.json").string());
  ASSERT_EQ(sources.groups.size(), 2u);
  EXPECT_EQ(sources.groups[1].at(0), (dir / "c.json").string());
  const tools::GatheredRecords g = tools::gather_records(sources);
  EXPECT_EQ(g.files, 3u);
  EXPECT_EQ(g.later, 1u);
  EXPECT_EQ(g.later_problems, 1u);
  EXPECT_EQ(tools::records_json(g.records),
            "[\n"
            R"(["row", "bf16", 4096, 4096, 1, "cublaslt", "heuristic", 9.5],)" "\n"
            R"(["row", "bf16", 4096, 4096, 1, "cutlass_sm90", "a", 12.0],)" "\n"
            R"(["row", "bf16", 4096, 4096, 2, "cublaslt", "heuristic", 20.1235])" "\n]\n");

  // Mistakes in the manifest fail naming it and the place.
  const auto fails = [&](const std::string& groups, const std::string& want) {
    write("bad.json", R"({"format": "fp8route-table-sources", "version": 1, )" + stamp + R"(, "groups": )" + groups + "}");
    try {
      tools::gather_records(tools::load_table_sources((dir / "bad.json").string()));
      ADD_FAILURE() << groups << ": no error";
    } catch (const Error& e) {
      EXPECT_EQ(e.category(), ErrorCategory::io_error) << e.what();
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
  };
  fails(R"([{"files": ["b.json"]}, {"files": ["./b.json"]}])", "groups[1].files[0]: the same file as groups[0].files[0]");
  fails(R"([])", "groups: expected an array of at least 1");
  fails(R"([{"files": ["m.txt"]}])", "expected a tune raw file (.jsonl) or a gemm_bench JSON array");
  fails(R"([{"files": ["missing.json"]}])", "missing.json: cannot open");
  write("d.json", "[{" + p1 + R"(,"backend":"cublaslt","config":"heuristic","us":-1}])");
  fails(R"([{"files": ["d.json"]}])", "d.json: [0].us: expected a positive time");
}

// Acceptance (a): at every measured point the routed choice is within 3% of the measured best.
TEST(Route, EveryMeasuredPointWithin3PercentOfBest) {
  const Router router(build_routing_table(h200_records(), h200_stamp()), measured_on_h200());
  size_t n = 0;
  double worst = 1;
  std::string worst_at;
  for (const auto& [pt, times] : points_of(h200_records())) {
    const auto [scale, out, pn, pk, pm] = pt;
    const GemmProblem p = make_problem(pm, pn, pk, scale, out);
    const Route r = router.select(p);
    ASSERT_EQ(r.source, Route::Source::exact) << to_string(p) << ": " << r.why;
    const double ratio = times.at({r.backend, r.config}) / best_of(times);
    ++n;
    if (ratio > worst) worst = ratio, worst_at = to_string(p);
    EXPECT_LE(ratio, 1.03) << to_string(p) << ": " << r.backend << "/" << r.config;
  }
  std::printf("3%% check: %zu measured points, worst %.4fx of best%s%s\n", n, worst,
              worst_at.empty() ? "" : " at ", worst_at.c_str());
}

// Acceptance (b): each model's shapes (every TP degree of the catalog) routed from a table of the
// other models' measurements alone. Shapes another model shares are held out too, so every point
// routes by the nearest entry.
// The same points with a load-time probe (LinearPlan::probe): Router::probe_candidates timed on the
// GPU and the fastest taken. Here "timed" reads the recorded H200 times of those candidates, so this
// is the probe's choice if the probe ranks them as the recorded measurements did.
struct HeldOut {
  std::string model;
  size_t points = 0, over_20 = 0;
  double geomean = 1, worst = 1;
  std::string worst_at;
  size_t probed_over_20 = 0, probed_configs = 0;  // configs timed, summed over the points
  double probed_geomean = 1, probed_worst = 1;
  std::string probed_worst_at;
};

// One catalog model held out: its (N, K) at every TP of the catalog, and the router of a table
// built from the recorded measurements of every other shape.
struct HeldOutModel {
  std::set<std::pair<int64_t, int64_t>> shapes;
  Router router;
};

HeldOutModel hold_out(const tools::ShapeCatalog& catalog, const std::string& model, SupportsFn supports) {
  std::vector<tools::LayerShape> layers;
  for (const auto& l : catalog.layers)
    if (l.model == model) layers.push_back(l);
  std::set<std::pair<int64_t, int64_t>> shapes;
  for (int tp : catalog.tp)
    for (const auto& l : tools::at_tp(layers, tp)) shapes.insert({l.n, l.k});
  std::vector<MeasurementRecord> rest;
  for (const MeasurementRecord& r : h200_records())
    if (!shapes.count({r.n, r.k})) rest.push_back(r);
  return {std::move(shapes), Router(build_routing_table(rest, h200_stamp()), std::move(supports))};
}

std::set<std::string> catalog_models(const tools::ShapeCatalog& catalog) {
  std::set<std::string> models;
  for (const auto& l : catalog.layers) models.insert(l.model);
  return models;
}

const std::vector<HeldOut>& held_out_figures() {
  static const std::vector<HeldOut> figures = [] {
  const tools::ShapeCatalog catalog = tools::load_catalog(tools::default_catalog_path());
  const std::map<Point, Times> all = points_of(h200_records());
  std::vector<HeldOut> out;
  for (const std::string& model : catalog_models(catalog)) {
    const auto [shapes, router] = hold_out(catalog, model, measured_on_h200());
    HeldOut h{model};
    double log_sum = 0, probed_log_sum = 0;
    for (const auto& [pt, times] : all) {
      const auto [scale, out_dtype, pn, pk, pm] = pt;
      if (!shapes.count({pn, pk})) continue;
      const GemmProblem p = make_problem(pm, pn, pk, scale, out_dtype);
      const Route r = router.select(p);
      const auto it = times.find({r.backend, r.config});
      EXPECT_NE(it, times.end()) << model << ": " << to_string(p) << " routed to unmeasured "
                                 << r.backend << "/" << r.config << ": " << r.why;
      if (it == times.end()) continue;
      const double ratio = it->second / best_of(times);
      log_sum += std::log(ratio), ++h.points;
      h.over_20 += ratio > 1.2;
      // FP8ROUTE_HELDOUT_LIST=1: each point over 20%, with the best config and why the router chose.
      if (ratio > 1.2 && std::getenv("FP8ROUTE_HELDOUT_LIST")) {
        const auto best = std::min_element(times.begin(), times.end(),
                                           [](const auto& x, const auto& y) { return x.second < y.second; });
        std::printf("over 20%%: %s: %.3fx, %s/%s against %s/%s; %s\n", to_string(p).c_str(), ratio, r.backend.c_str(),
                    r.config.c_str(), best->first.first.c_str(), best->first.second.c_str(), r.why.c_str());
      }
      if (ratio > h.worst) h.worst = ratio, h.worst_at = to_string(p) + " -> " + r.backend + "/" + r.config;
      // The probe: its candidates are what the H200 supports (measured_on_h200), so each has a time.
      const std::vector<std::pair<std::string, std::string>> probed = router.probe_candidates(p, ProbeOptions{}.top);
      double fastest = INFINITY;
      std::string fastest_name;
      for (const auto& c : probed)
        if (times.at(c) < fastest) fastest = times.at(c), fastest_name = c.first + "/" + c.second;
      const double probed_ratio = fastest / best_of(times);
      probed_log_sum += std::log(probed_ratio), h.probed_configs += probed.size();
      h.probed_over_20 += probed_ratio > 1.2;
      if (probed_ratio > h.probed_worst) h.probed_worst = probed_ratio, h.probed_worst_at = to_string(p) + " -> " + fastest_name;
    }
    EXPECT_GT(h.points, 0u) << model;
    h.geomean = std::exp(log_sum / double(std::max<size_t>(h.points, 1)));
    h.probed_geomean = std::exp(probed_log_sum / double(std::max<size_t>(h.points, 1)));
    std::printf("held out %-16s %5zu points: geomean loss %5.2f%%, %3zu points lose > 20%%, worst %6.2f%% at %s\n",
                model.c_str(), h.points, 100 * (h.geomean - 1), h.over_20, 100 * (h.worst - 1), h.worst_at.c_str());
    std::printf("  probed (%.1f configs per point): geomean loss %5.2f%%, %3zu points lose > 20%%, worst %6.2f%% at %s\n",
                double(h.probed_configs) / double(std::max<size_t>(h.points, 1)), 100 * (h.probed_geomean - 1),
                h.probed_over_20, 100 * (h.probed_worst - 1), h.probed_worst_at.c_str());
    out.push_back(h);
  }
  return out;
  }();
  return figures;
}

TEST(Route, HeldOutModelGeomeanLossWithin5Percent) {
  for (const HeldOut& h : held_out_figures()) EXPECT_LE(h.geomean, 1.05) << h.model;
}

// Both held-out bounds with the load-time probe (docs/routing.md, "Probing"): the geometric-mean
// loss per model, and no point over 20%.
TEST(Route, HeldOutModelProbedWithin20Percent) {
  for (const HeldOut& h : held_out_figures()) {
    EXPECT_LE(h.probed_geomean, 1.05) << h.model;
    EXPECT_LE(h.probed_worst, 1.20) << h.model << ": " << h.probed_worst_at;
  }
}

// An M between two measured M of an entry: each interior measured M held out of every entry in
// turn and routed from the rest (the time interpolated between its measured neighbours; CUTLASS
// times in tiles along M, interpolation_weight in router.cpp; docs/routing.md, "The router").
// An exact entry measured only below M: every H200 entry measured to M = 4096 is cut at M = 64 and
// at 256 in turn, and its measured M above the cut are routed by the nearest entries measured there
// (find_entry). A Router over the cut table's slice for the shape chooses the same (LinearPlan's
// router is such a slice); the entry's own ranking at its largest M would lose far more
// (docs/routing.md, "The router").
TEST(Route, ExactEntryMeasuredOnlyBelowM) {
  const std::map<Point, Times> all = points_of(h200_records());
  std::set<std::tuple<ScaleKind, DType, int64_t, int64_t>> full_range;
  for (const auto& [pt, t] : all)
    if (std::get<4>(pt) == 4096) full_range.insert({std::get<0>(pt), std::get<1>(pt), std::get<2>(pt), std::get<3>(pt)});
  ASSERT_GT(full_range.size(), 100u);
  // build_routing_table builds each entry from its own records alone, so the cut table is the full
  // one with the one entry rebuilt (not all of it per entry, which costs this test a third more).
  const RoutingTable full = build_routing_table(h200_records(), h200_stamp());
  for (int64_t cut : {64, 256}) {
    double log_sum = 0, worst = 1;
    size_t n = 0;
    for (const auto& [scale, out, pn, pk] : full_range) {
      std::vector<MeasurementRecord> below;
      for (const MeasurementRecord& r : h200_records())
        if (r.scale == scale && r.out == out && r.n == pn && r.k == pk && r.m <= cut) below.push_back(r);
      RoutingTable cut_table = full;
      for (TableEntry& e : cut_table.entries)
        if (e.scale == scale && e.out == out && e.n == pn && e.k == pk) e = build_routing_table(below, h200_stamp()).entries.at(0);
      const Router router(std::move(cut_table), measured_on_h200());
      const Router sliced(router.slice(scale, out, pn, pk), measured_on_h200());
      for (const auto& [pt, t] : all) {
        const auto [ps, po, n2, k2, m] = pt;
        if (ps != scale || po != out || n2 != pn || k2 != pk || m <= cut) continue;
        const GemmProblem p = make_problem(m, pn, pk, scale, out);
        const Route r = router.select(p);
        ASSERT_EQ(r.source, Route::Source::nearest) << to_string(p) << ": " << r.why;
        EXPECT_NE(r.why.find("is measured only up to m=" + std::to_string(cut)), std::string::npos) << r.why;
        const Route s = sliced.select(p);
        ASSERT_EQ(s.backend + "/" + s.config, r.backend + "/" + r.config) << to_string(p) << "\n" << s.why << "\n" << r.why;
        const double ratio = t.at({r.backend, r.config}) / best_of(t);
        log_sum += std::log(ratio), ++n, worst = std::max(worst, ratio);
      }
      // At or below the cut, the exact entry still serves; beyond every entry's M, the entries
      // measured furthest do.
      EXPECT_EQ(router.select(make_problem(cut, pn, pk, scale, out)).source, Route::Source::exact);
      // (Nothing was measured at M = 16384, so here every config may run.)
      const SupportsFn any = [](std::string_view, std::string_view, const GemmProblem&) { return std::string(); };
      const Router router_any(router.table(), any), sliced_any(router.slice(scale, out, pn, pk), any);
      const GemmProblem huge = make_problem(16384, pn, pk, scale, out);
      const Route h = router_any.select(huge);
      ASSERT_EQ(h.source, Route::Source::nearest) << to_string(huge) << ": " << h.why;
      EXPECT_EQ(sliced_any.select(huge).config, h.config);
    }
    const double geomean = std::exp(log_sum / double(n));
    std::printf("entries cut at m=%lld: %zu points above routed by the nearest entries, geomean loss %.2f%%, worst %.3fx\n",
                (long long)cut, n, 100 * (geomean - 1), worst);
    EXPECT_LE(geomean, 1.05);
  }
}

TEST(Route, HeldOutMInterpolates) {
  const std::map<Point, Times> all = points_of(h200_records());
  std::map<std::tuple<ScaleKind, DType, int64_t, int64_t>, std::set<int64_t>> ms_of;
  for (const auto& [pt, t] : all) ms_of[{std::get<0>(pt), std::get<1>(pt), std::get<2>(pt), std::get<3>(pt)}].insert(std::get<4>(pt));
  std::set<int64_t> ms;
  for (const auto& [pt, t] : all) ms.insert(std::get<4>(pt));
  double log_sum = 0, worst = 1;
  size_t n = 0, over_3 = 0;
  for (int64_t held : ms) {
    std::vector<MeasurementRecord> rest;
    for (const MeasurementRecord& r : h200_records())
      if (r.m != held) rest.push_back(r);
    const Router router(build_routing_table(rest, h200_stamp()), measured_on_h200());
    for (const auto& [key, mset] : ms_of) {
      if (!mset.count(held) || held == *mset.begin() || held == *mset.rbegin()) continue;  // interior only
      const auto [scale, out, pn, pk] = key;
      const Times& t = all.at({scale, out, pn, pk, held});
      const GemmProblem p = make_problem(held, pn, pk, scale, out);
      const Route r = router.select(p);
      ASSERT_EQ(r.source, Route::Source::exact) << to_string(p);
      ASSERT_NE(r.why.find("interpolated"), std::string::npos) << to_string(p) << ": " << r.why;
      const double ratio = t.at({r.backend, r.config}) / best_of(t);
      log_sum += std::log(ratio), ++n, over_3 += ratio > 1.03, worst = std::max(worst, ratio);
    }
  }
  const double geomean = std::exp(log_sum / double(n));
  std::printf("held-out M: %zu points, geomean loss %.2f%%, %zu lose > 3%%, worst %.2f%%\n", n, 100 * (geomean - 1),
              over_3, 100 * (worst - 1));
  EXPECT_GT(n, 1000u);
  EXPECT_LE(geomean, 1.025);
}

// ---- table files ---------------------------------------------------------------------------------

std::string temp_file(const std::string& name, const std::string& text) {
  const std::string path = (std::filesystem::temp_directory_path() / ("fp8route_test_route_" + name)).string();
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

const char* kGood = R"({"format": "fp8route-routing-table", "version": 1,
"stamp": {"gpu": "NVIDIA H200", "sm_count": 132, "cuda": "13.0", "cublaslt": "13.1", "fp8route": "0.1.0", "date": "2026-11-30"},
"entries": [{"scale": "row", "out": "bf16", "n": 4096, "k": 4096,
  "breakpoints": [[16, "cutlass_sm90", "row_64x16x128_1x1x1_pingpong_swapab"], [4096, "cublaslt", "heuristic"]],
  "measured": [[16, "cutlass_sm90", "row_64x16x128_1x1x1_pingpong_swapab", 10.5], [16, "cublaslt", "heuristic", 12.0],
               [4096, "cublaslt", "heuristic", 100.0], [4096, "cutlass_sm90", "row_64x16x128_1x1x1_pingpong_swapab", 180.0]]}]})";

std::string replaced(std::string s, const std::string& from, const std::string& to) {
  const size_t at = s.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return s.replace(at, from.size(), to);
}

TEST(Route, MalformedTablesNameTheFileAndTheProblem) {
  const std::string good(kGood);
  const std::vector<std::tuple<std::string, std::string, std::string>> cases = {
      {"empty", "", "empty"},
      {"truncated", good.substr(0, good.size() / 2), "truncated"},
      {"not_json", "routing table, please", "not JSON"},
      {"missing_stamp", replaced(good, "\"stamp\"", "\"stump\""), "missing field 'stamp'"},
      {"wrong_type", replaced(good, "\"n\": 4096", "\"n\": \"4096\""), "entries[0].n"},
      {"unknown_scale", replaced(good, "\"scale\": \"row\"", "\"scale\": \"rows\""), "unknown scale kind"},
      {"unknown_backend", replaced(good, "[4096, \"cublaslt\"", "[4096, \"cublas\""), "unknown backend 'cublas'"},
      {"decreasing", replaced(good, "[[16, ", "[[8192, "), "does not increase"},
      {"bad_time", replaced(good, "10.5", "-1"), "positive time"},
  };
  for (const auto& [name, text, expect] : cases) {
    const std::string path = temp_file(name + ".json", text);
    try {
      load_routing_table(path);
      ADD_FAILURE() << name << ": loaded";
    } catch (const Error& e) {
      EXPECT_EQ(e.category(), ErrorCategory::io_error) << name;
      EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << name << ": " << e.what();
      EXPECT_NE(std::string(e.what()).find(expect), std::string::npos) << name << ": " << e.what();
    }
    Router r = Router::from_file(path);  // must not throw
    EXPECT_NE(r.load_error().find(path), std::string::npos) << name;
    const GemmProblem p = make_problem(16, 4096, 4096, ScaleKind::row);
    EXPECT_EQ(r.select(p).source, Route::Source::heuristic) << name;
    EXPECT_NE(r.explain(p).find("not loaded"), std::string::npos) << name;
    std::filesystem::remove(path);
  }
  EXPECT_NO_THROW(load_routing_table(temp_file("good.json", good)));
}

TEST(Route, SaveLoadRoundTrip) {
  const RoutingTable t = build_routing_table(h200_records(), h200_stamp());
  const std::string path = temp_file("roundtrip.json", "");
  save_routing_table(t, path);
  EXPECT_TRUE(load_routing_table(path) == t);
  std::filesystem::remove(path);
}

// fp8route tune's raw file: finished problems only, a torn last line tolerated (and where the good
// part ends, so a resume can cut it off), a damaged line elsewhere named.
TEST(Route, TuneRawFileResumes) {
  const std::string stamp =
      R"({"stamp":{"gpu":"NVIDIA H200","sm_count":132,"cuda":"13.0","cublaslt":"13.1.0","fp8route":"0.1.0","date":"2026-11-30"}})";
  const std::string rec1 = R"({"scale":"row","out":"bf16","n":4096,"k":4096,"m":1,"backend":"cublaslt","config":"heuristic","us":10.5})";
  const std::string done1 = R"({"done":true,"scale":"row","out":"bf16","n":4096,"k":4096,"m":1})";
  const std::string rec2 = R"({"scale":"row","out":"bf16","n":4096,"k":4096,"m":16,"backend":"cublaslt","config":"heuristic","us":11.5})";
  const std::string good = stamp + "\n" + rec1 + "\n" + done1 + "\n" + rec2 + "\n";
  TuneRawFile r = read_tune_raw(temp_file("raw_ok.jsonl", good));
  ASSERT_TRUE(r.stamp.has_value());
  EXPECT_EQ(r.stamp->gpu, "NVIDIA H200");
  ASSERT_EQ(r.records.size(), 1u);  // m = 16 has no "done" line: measured again on resume
  EXPECT_EQ(r.records[0].us, 10.5);
  ASSERT_EQ(r.finished.size(), 1u);
  EXPECT_EQ(std::get<4>(r.finished[0]), 1);
  EXPECT_FALSE(r.torn);
  EXPECT_EQ(r.good_bytes, static_cast<int64_t>(good.size()));
  // Killed mid-write: the last line is cut short.
  const std::string torn = good + rec2.substr(0, 20);
  r = read_tune_raw(temp_file("raw_torn.jsonl", torn));
  EXPECT_TRUE(r.torn);
  EXPECT_EQ(r.good_bytes, static_cast<int64_t>(good.size()));
  EXPECT_EQ(r.finished.size(), 1u);
  // A damaged line that is not the last: an error naming the file and the line.
  try {
    read_tune_raw(temp_file("raw_bad.jsonl", stamp + "\n" + rec1.substr(0, 30) + "\n" + done1 + "\n"));
    ADD_FAILURE() << "a damaged middle line was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.category(), ErrorCategory::io_error);
    EXPECT_NE(std::string(e.what()).find("raw_bad.jsonl:2"), std::string::npos) << e.what();
  }
  // A screened tune's "done" line lists the configs the quick round dropped, with their quick
  // times: records of that problem too.
  const std::string done1_screened =
      R"({"done":true,"scale":"row","out":"bf16","n":4096,"k":4096,"m":1,"screen_pct":25,)"
      R"("screened_out":[["skinny","m8_n32_k128x4_splitk",31.5]]})";
  r = read_tune_raw(temp_file("raw_screened.jsonl", stamp + "\n" + rec1 + "\n" + done1_screened + "\n"));
  ASSERT_EQ(r.records.size(), 2u);
  EXPECT_EQ(r.records[0].backend, "cublaslt");
  EXPECT_EQ(r.records[1].backend, "skinny");
  EXPECT_EQ(r.records[1].config, "m8_n32_k128x4_splitk");
  EXPECT_EQ(r.records[1].m, 1);
  EXPECT_EQ(r.records[1].n, 4096);
  EXPECT_DOUBLE_EQ(r.records[1].us, 31.5);
  EXPECT_EQ(r.finished.size(), 1u);
  EXPECT_FALSE(r.torn);
  // --final: the two near-ties were timed again (cuBLASLt 12.0, CUTLASS 12.5); a config timed only
  // in the full round (11.0, a different mix of kernels and instances) ranks 5% behind the fastest
  // of them, and a quick time further behind than that keeps its own.
  const std::string final_recs =
      R"({"scale":"row","out":"bf16","n":4096,"k":4096,"m":1,"backend":"cublaslt","config":"heuristic","us":12.0})"
      "\n"
      R"({"scale":"row","out":"bf16","n":4096,"k":4096,"m":1,"backend":"cutlass_sm90","config":"a","us":12.5})"
      "\n"
      R"({"scale":"row","out":"bf16","n":4096,"k":4096,"m":1,"backend":"cutlass_sm90","config":"b","us":11.0})"
      "\n";
  const std::string done1_final =
      R"({"done":true,"scale":"row","out":"bf16","n":4096,"k":4096,"m":1,"screen_pct":25,)"
      R"("screened_out":[["skinny","m8_n32_k128x4_splitk",31.5]],"final_pct":5,"final_instances":4,)"
      R"("final":[["cublaslt","heuristic"],["cutlass_sm90","a"]]})";
  r = read_tune_raw(temp_file("raw_final.jsonl", stamp + "\n" + final_recs + done1_final + "\n"));
  ASSERT_EQ(r.records.size(), 4u);
  std::map<std::string, double> us;
  for (const MeasurementRecord& x : r.records) us[x.backend + "/" + x.config] = x.us;
  EXPECT_DOUBLE_EQ(us["cublaslt/heuristic"], 12.0);
  EXPECT_DOUBLE_EQ(us["cutlass_sm90/a"], 12.5);
  EXPECT_DOUBLE_EQ(us["cutlass_sm90/b"], 12.0 * 1.05);
  EXPECT_DOUBLE_EQ(us["skinny/m8_n32_k128x4_splitk"], 31.5);
  EXPECT_EQ(build_routing_table(r.records, h200_stamp()).entries.at(0).breakpoints.at(0).config, "heuristic");
  // Without a final round (or when none of its configs is among the records) nothing moves.
  std::vector<MeasurementRecord> plain = r.records;
  plain[2].us = 11.0;
  settle_final_round(plain, {{"skinny", "other"}}, 5);
  EXPECT_DOUBLE_EQ(plain[2].us, 11.0);
  settle_final_round(plain, {}, 5);
  EXPECT_DOUBLE_EQ(plain[2].us, 11.0);
  EXPECT_TRUE(read_tune_raw(temp_file("raw_none.jsonl", "")).records.empty());
  EXPECT_FALSE(read_tune_raw("/nonexistent/raw.jsonl").stamp.has_value());
}

TEST(Route, BreakpointsAndNearest) {
  const RoutingTable t = load_routing_table(temp_file("good.json", kGood));
  const auto all_run = [](std::string_view, std::string_view, const GemmProblem&) { return std::string(); };
  const Router r(t, all_run);
  EXPECT_EQ(r.select(make_problem(1, 4096, 4096, ScaleKind::row)).backend, "cutlass_sm90");
  // Between measured M: by time interpolated, CUTLASS's in its 16-row tiles along M (1 at M = 16,
  // 256 at 4096), cuBLASLt's in M: at 17 CUTLASS (~11.2 us against cuBLASLt's ~12.0), at 2000
  // cuBLASLt (~55 against ~93).
  const Route at17 = r.select(make_problem(17, 4096, 4096, ScaleKind::row));
  EXPECT_EQ(at17.backend, "cutlass_sm90");
  EXPECT_NE(at17.why.find("interpolated between m=16 and m=4096"), std::string::npos) << at17.why;
  EXPECT_EQ(r.select(make_problem(2000, 4096, 4096, ScaleKind::row)).backend, "cublaslt");
  EXPECT_EQ(r.select(make_problem(99999, 4096, 4096, ScaleKind::row)).backend, "cublaslt");  // above the last
  const Route near = r.select(make_problem(8, 5120, 3584, ScaleKind::row));
  EXPECT_EQ(near.source, Route::Source::nearest);
  EXPECT_EQ(near.backend, "cutlass_sm90");
  EXPECT_EQ(r.select(make_problem(8, 4096, 4096, ScaleKind::tensor)).source, Route::Source::heuristic);
  // The breakpoint's choice cannot run: the next measured candidate does, and says why.
  const Router no_cutlass(t, [](std::string_view b, std::string_view, const GemmProblem&) {
    return b == "cutlass_sm90" ? std::string("not today") : std::string();
  });
  const Route fb = no_cutlass.select(make_problem(16, 4096, 4096, ScaleKind::row));
  EXPECT_EQ(fb.backend, "cublaslt");
  EXPECT_EQ(fb.source, Route::Source::exact);
  EXPECT_NE(fb.why.find("not today"), std::string::npos) << fb.why;
}

// What a probe times: the table's first `top` candidates that can run, every cuBLASLt and skinny
// config that can, gemm_select()'s choice; each once. Nothing the H200 could not run.
TEST(Route, ProbeCandidates) {
  const Router router(build_routing_table(h200_records(), h200_stamp()), measured_on_h200());
  const SupportsFn h200 = measured_on_h200();
  size_t with_skinny = 0, with_select = 0, checked = 0;
  for (const auto& [pt, times] : points_of(h200_records())) {
    const auto [scale, out, pn, pk, pm] = pt;
    if (pn % 3 != 0) continue;  // a sample
    const GemmProblem p = make_problem(pm, pn, pk, scale, out);
    for (size_t top : {1, 5}) {
      const auto probed = router.probe_candidates(p, top);
      std::set<std::pair<std::string, std::string>> seen(probed.begin(), probed.end());
      ASSERT_EQ(seen.size(), probed.size()) << to_string(p) << ": a candidate twice";
      for (const auto& [b, c] : probed) EXPECT_EQ(h200(b, c, p), "") << to_string(p) << ": " << b << "/" << c;
      std::vector<std::pair<std::string, std::string>> runnable;
      for (const auto& c : router.candidates(p))
        if (h200(c.first, c.second, p).empty() && runnable.size() < top) runnable.push_back(c);
      ASSERT_GE(probed.size(), runnable.size());
      EXPECT_TRUE(std::equal(runnable.begin(), runnable.end(), probed.begin())) << to_string(p) << ": the table's best first";
      for (const char* b : {"cublaslt", "skinny"})
        for (const std::string& c : gemm_configs(b))
          if (h200(b, c, p).empty()) EXPECT_TRUE(seen.count({b, c})) << to_string(p) << ": " << b << "/" << c << " missing";
      const GemmChoice sel = gemm_select(p);
      if (h200(sel.backend, sel.config, p).empty()) EXPECT_TRUE(seen.count({sel.backend, sel.config})) << to_string(p);
      with_skinny += seen.count({"skinny", "m8_n32_k128x4_splitk"});
      with_select += h200(sel.backend, sel.config, p).empty();
      ++checked;
    }
  }
  EXPECT_GT(checked, 500u);
  EXPECT_GT(with_skinny, 0u);
  EXPECT_GT(with_select, 0u);
}

// Records merged into a router: a new shape gets an exact entry; an entry's M the records cover are
// ranked by them, its other M keep their measurements.
TEST(Route, WithMeasurementsAddsAndReplaces) {
  const auto all_run = [](std::string_view, std::string_view, const GemmProblem&) { return std::string(); };
  const Router r(load_routing_table(temp_file("good_wm.json", kGood)), all_run);
  const GemmProblem fresh = make_problem(8, 5120, 3584, ScaleKind::row);
  ASSERT_EQ(r.select(fresh).source, Route::Source::nearest);
  const std::vector<MeasurementRecord> recs = {
      {ScaleKind::row, DType::bf16, 5120, 3584, 8, "cublaslt", "heuristic", 7.0},
      {ScaleKind::row, DType::bf16, 5120, 3584, 8, "cutlass_sm90", "row_64x16x128_1x1x1_pingpong_swapab", 9.0},
      // 4096 x 4096 at M = 16: cuBLASLt now fastest there; M = 4096 keeps its table times.
      {ScaleKind::row, DType::bf16, 4096, 4096, 16, "cublaslt", "heuristic", 5.0},
  };
  const size_t before = r.table().entries.size();
  const Router m = r.with_measurements(recs);
  EXPECT_EQ(m.table().entries.size(), before + 1);
  const Route at8 = m.select(fresh);
  EXPECT_EQ(at8.source, Route::Source::exact);
  EXPECT_EQ(at8.backend, "cublaslt");
  EXPECT_EQ(r.select(make_problem(16, 4096, 4096, ScaleKind::row)).backend, "cutlass_sm90");
  EXPECT_EQ(m.select(make_problem(16, 4096, 4096, ScaleKind::row)).backend, "cublaslt");
  for (int64_t mm : {int64_t{4096}, int64_t{99999}})
    EXPECT_EQ(m.select(make_problem(mm, 4096, 4096, ScaleKind::row)).config,
              r.select(make_problem(mm, 4096, 4096, ScaleKind::row)).config);
  size_t at16 = 0;
  for (const TableEntry& e : m.table().entries)
    if (e.n == 4096 && e.k == 4096 && e.scale == ScaleKind::row)
      for (const Measured& x : e.measured) at16 += x.m == 16;
  EXPECT_EQ(at16, 1u) << "the table's other M = 16 times are replaced, not mixed with the probe's";
  EXPECT_EQ(r.with_measurements({}).table(), r.table());
}

template <class F>
void expect_error(F&& f, ErrorCategory category, const std::string& names) {
  try {
    f();
    ADD_FAILURE() << "no error (expected one naming '" << names << "')";
  } catch (const Error& e) {
    EXPECT_EQ(e.category(), category) << e.what();
    EXPECT_NE(std::string(e.what()).find(names), std::string::npos) << e.what();
  }
}

// Without a GPU: a probe with something to time says so; one whose M the table covers times
// nothing; bad options name the field.
TEST(Route, ProbeShapeWithoutGpu) {
  const Router router(build_routing_table(h200_records(), h200_stamp()), measured_on_h200());
  const auto at = [](int64_t n, int64_t k) {
    return [n, k](int64_t m, const std::string&) { return make_problem(m, n, k, ScaleKind::row); };
  };
  ProbeOptions opt;
  EXPECT_TRUE(probe_shape(router, at(4096, 4096), opt).empty()) << "4096 x 4096 is measured at every grid M";
  opt.m_grid = {16};
  opt.top = 0;
  expect_error([&] { probe_shape(router, at(4096, 4096), opt); }, ErrorCategory::invalid_argument, "top");
  opt.top = 5, opt.m_grid = {0};
  expect_error([&] { probe_shape(router, at(4096, 4096), opt); }, ErrorCategory::invalid_argument, "m_grid");
  if (cuda_device_count() > 0) GTEST_SKIP() << "a GPU is present (the GPU test is LinearPlanGpu.ProbeTimesAnUnseenShapeAndRoutesByIt)";
  opt.m_grid = {16};
  expect_error([&] { probe_shape(router, at(5120, 3000), opt); }, ErrorCategory::unsupported, "needs a GPU");
}

// probe_shapes walks every (N, K) at every scale kind in order, reporting each; with every M exact in
// the table nothing is timed (no GPU needed), and a shape needing timing without a GPU throws.
TEST(Route, ProbeShapesReportsEachShapeInOrder) {
  const Router router(build_routing_table(h200_records(), h200_stamp()), measured_on_h200());
  std::vector<std::tuple<size_t, ScaleKind, size_t, size_t>> seen;  // shape, scale, done, total
  const auto recs = probe_shapes(router, {{4096, 4096}, {4096, 4096}}, {ScaleKind::row, ScaleKind::tensor},
                                 DType::bf16, ProbeOptions{}, [&](const ProbedShape& s) {
                                   ASSERT_NE(s.records, nullptr);
                                   EXPECT_TRUE(s.records->empty());
                                   seen.emplace_back(s.shape, s.scale, s.done, s.total);
                                 });
  EXPECT_TRUE(recs.empty());
  using T = std::tuple<size_t, ScaleKind, size_t, size_t>;
  EXPECT_EQ(seen, (std::vector<T>{T{0, ScaleKind::row, 1, 4}, T{0, ScaleKind::tensor, 2, 4},
                                  T{1, ScaleKind::row, 3, 4}, T{1, ScaleKind::tensor, 4, 4}}));
  if (cuda_device_count() > 0) GTEST_SKIP() << "a GPU is present (its probes are timed in LinearPlanGpu and test_cli)";
  ProbeOptions opt;
  opt.m_grid = {16};
  expect_error([&] { probe_shapes(router, {{5120, 3000}}, {ScaleKind::row}, DType::bf16, opt); },
               ErrorCategory::unsupported, "needs a GPU");
}

// A CUTLASS config's time steps with its tiles along M: M = 17 runs two 16-row tiles, as M = 32
// does, so a config twice as slow at 32 is as slow at 17 (interpolation in M would put it at
// ~10.6 us and choose it).
TEST(Route, InterpolationCountsCutlassTilesAlongM) {
  const std::string cfg = "row_128x16x128_1x1x1_coop_streamk_swapab";
  ASSERT_EQ(gemm::config_m_tile("cutlass_sm90", cfg), 16);
  EXPECT_EQ(gemm::config_m_tile("cutlass_sm90", "row_128x128x128_1x2x1_pingpong_fastacc"), 128);
  EXPECT_EQ(gemm::config_m_tile("cutlass_sm90", "no_such_config"), 0);
  EXPECT_EQ(gemm::config_m_tile("cublaslt", "heuristic"), 0);
  std::vector<MeasurementRecord> rs;
  for (auto [m, us_cutlass, us_lt] : {std::tuple{16, 10.0, 12.0}, {32, 20.0, 16.0}}) {
    rs.push_back({ScaleKind::row, DType::bf16, 4096, 4096, m, "cutlass_sm90", cfg, us_cutlass});
    rs.push_back({ScaleKind::row, DType::bf16, 4096, 4096, m, "cublaslt", "heuristic", us_lt});
  }
  const Router r(build_routing_table(rs, h200_stamp()),
                 [](std::string_view, std::string_view, const GemmProblem&) { return std::string(); });
  EXPECT_EQ(r.select(make_problem(16, 4096, 4096, ScaleKind::row)).backend, "cutlass_sm90");
  const Route at17 = r.select(make_problem(17, 4096, 4096, ScaleKind::row));
  EXPECT_EQ(at17.backend, "cublaslt") << at17.why;
  EXPECT_EQ(r.select(make_problem(32, 4096, 4096, ScaleKind::row)).backend, "cublaslt");
  // explain shows the estimates select() ranked: cuBLASLt 12 + (16 - 12) / 16 = 12.25 us, CUTLASS
  // at its two tiles' 20 us.
  const std::string text = r.explain(make_problem(17, 4096, 4096, ScaleKind::row));
  EXPECT_NE(text.find("estimated at m=17 from m=16 and m=32"), std::string::npos) << text;
  EXPECT_NE(text.find("1.      12.25 us   1.000x  cublaslt/heuristic"), std::string::npos) << text;
  EXPECT_NE(text.find("2.      20.00 us   1.633x  cutlass_sm90/" + cfg), std::string::npos) << text;
}

// A config measured at only one of the two M around a problem is estimated by that time when it
// runs as many tiles at the problem's M: skinny's M <= 8 config, measured at M = 4 and unable to
// run M = 16, wins M = 8 on its M = 4 time (one 8-token tile either way), not M = 12.
TEST(Route, InterpolationTakesAOneSidedConfigOfTheSameTiles) {
  const std::string skinny = "m8_n32_k128x4_splitk";
  ASSERT_EQ(gemm::config_m_tile("skinny", skinny), 8);
  std::vector<MeasurementRecord> rs = {
      {ScaleKind::row, DType::bf16, 4096, 4096, 4, "skinny", skinny, 5.0},
      {ScaleKind::row, DType::bf16, 4096, 4096, 4, "cublaslt", "heuristic", 7.0},
      {ScaleKind::row, DType::bf16, 4096, 4096, 16, "cublaslt", "heuristic", 8.0}};
  const Router r(build_routing_table(rs, h200_stamp()),
                 [](std::string_view b, std::string_view, const GemmProblem& p) {
                   return b == "skinny" && p.m > 8 ? std::string("runs M <= 8") : std::string();
                 });
  const Route at8 = r.select(make_problem(8, 4096, 4096, ScaleKind::row));
  EXPECT_EQ(at8.backend + "/" + at8.config, "skinny/" + skinny) << at8.why;
  const std::string text = r.explain(make_problem(8, 4096, 4096, ScaleKind::row));
  EXPECT_NE(text.find("1.       5.00 us   1.000x  skinny/" + skinny), std::string::npos) << text;
  const Route at12 = r.select(make_problem(12, 4096, 4096, ScaleKind::row));
  EXPECT_EQ(at12.backend + "/" + at12.config, "cublaslt/heuristic") << at12.why;
}

// A shape the table lacks, at M <= 8: its neighbours are read at M itself, not at the M of the same
// output size, where the M <= 8 kernels were never measured (here 8 x 8192 / 1024 = 64).
TEST(Route, NearestEntriesAtDecodeMReadTheNeighbourAtM) {
  const std::string m8 = "m8_n32_k128x4_splitk", m64 = "m64_n128_k128x2_splitk",
                    cutlass = "row_64x16x128_1x1x1_pingpong_swapab";
  const std::vector<MeasurementRecord> rs = {
      {ScaleKind::row, DType::bf16, 1024, 4096, 8, "skinny", m8, 5.0},
      {ScaleKind::row, DType::bf16, 1024, 4096, 8, "cutlass_sm90", cutlass, 7.0},
      {ScaleKind::row, DType::bf16, 1024, 4096, 64, "cutlass_sm90", cutlass, 9.0},
      {ScaleKind::row, DType::bf16, 1024, 4096, 64, "skinny", m64, 10.0}};
  const Router r(build_routing_table(rs, h200_stamp()),
                 [](std::string_view, std::string_view c, const GemmProblem& p) {
                   return c == "m8_n32_k128x4_splitk" && p.m > 8 ? std::string("runs M <= 8") : std::string();
                 });
  const Route at8 = r.select(make_problem(8, 8192, 4096, ScaleKind::row));
  EXPECT_EQ(at8.source, Route::Source::nearest) << at8.why;
  EXPECT_EQ(at8.backend + "/" + at8.config, "skinny/" + m8) << at8.why;
  const Route at16 = r.select(make_problem(16, 8192, 4096, ScaleKind::row));  // output size: M = 128 there
  EXPECT_EQ(at16.backend + "/" + at16.config, "cutlass_sm90/" + cutlass) << at16.why;
}

// cuBLASLt's heuristicN names another algorithm at another M: it wins only at the M it was
// measured at, never between measured M or beyond them.
TEST(Route, HeuristicNOnlyAtItsMeasuredM) {
  const std::string text = replaced(replaced(std::string(kGood), "[4096, \"cublaslt\", \"heuristic\", 100.0]",
                                             "[4096, \"cublaslt\", \"heuristic\", 130.0], "
                                             "[4096, \"cublaslt\", \"heuristic2\", 100.0], "
                                             "[16, \"cublaslt\", \"heuristic2\", 9.0]"),
                                    "[4096, \"cublaslt\", \"heuristic\"]]", "[4096, \"cublaslt\", \"heuristic2\"]]");
  const Router r(load_routing_table(temp_file("heuristic2.json", text)),
                 [](std::string_view, std::string_view, const GemmProblem&) { return std::string(); });
  EXPECT_EQ(r.select(make_problem(4096, 4096, 4096, ScaleKind::row)).config, "heuristic2");  // measured here
  const Route above = r.select(make_problem(8192, 4096, 4096, ScaleKind::row));
  EXPECT_EQ(above.config, "heuristic") << above.why;  // cuBLASLt's own pick, next fastest at 4096
  EXPECT_NE(above.why.find("outside the measured range"), std::string::npos) << above.why;
  EXPECT_EQ(r.select(make_problem(64, 4096, 4096, ScaleKind::row)).backend, "cutlass_sm90");
  EXPECT_EQ(r.select(make_problem(2000, 4096, 4096, ScaleKind::row)).config, "heuristic");
}

// cuBLASLt's "precise" is its first answer to the request torch makes, an own choice as "heuristic"
// is: it carries between measured M and beyond them, where its second rank "precise1" does not.
TEST(Route, CuBlasLtPreciseCarriesOverAsItsOwnChoice) {
  for (const char* c : {"heuristic", "precise"}) EXPECT_TRUE(gemm::config_carries_over("cublaslt", c)) << c;
  for (const char* c : {"heuristic1", "ws1m", "precise1", "no_such_config"})
    EXPECT_FALSE(gemm::config_carries_over("cublaslt", c)) << c;
  EXPECT_TRUE(gemm::config_carries_over("skinny", "m8_n32_k128x4_splitk"));
  EXPECT_TRUE(gemm::config_carries_over("skinny", "no_such_config"));
  EXPECT_TRUE(gemm::config_carries_over("no_such_backend", "heuristic1"));
  const std::string text = replaced(std::string(kGood), "[4096, \"cublaslt\", \"heuristic\", 100.0]",
                                    "[4096, \"cublaslt\", \"heuristic\", 100.0], "
                                    "[4096, \"cublaslt\", \"precise\", 90.0], [16, \"cublaslt\", \"precise\", 9.0], "
                                    "[4096, \"cublaslt\", \"precise1\", 85.0], [16, \"cublaslt\", \"precise1\", 8.5]");
  const Router r(load_routing_table(temp_file("precise.json", text)),
                 [](std::string_view, std::string_view, const GemmProblem&) { return std::string(); });
  for (int64_t m : {64, 8192}) {
    const Route route = r.select(make_problem(m, 4096, 4096, ScaleKind::row));
    EXPECT_EQ(route.backend + "/" + route.config, "cublaslt/precise") << m << ": " << route.why;
  }
}

// Acceptance: explain names the source and why candidates were skipped. align = 8 rules out every
// fast backend (they need 16-byte TMA / cuBLASLt FP8 alignment), whatever the machine.
// explain() flags a choice whose runner-up was measured within 3% at that very M (such rankings
// move between two GPUs of one model), and only then: not for a clear winner, not at an M the
// entry did not measure.
TEST(Route, ExplainFlagsNearTies) {
  const Router router(build_routing_table(h200_records(), h200_stamp()), measured_on_h200());
  int near = 0, clear = 0;
  for (const auto& [pt, times] : points_of(h200_records())) {
    const auto [scale, out, pn, pk, pm] = pt;
    std::vector<double> us;
    for (const auto& [bc, t] : times) us.push_back(t);
    if (us.size() < 2) continue;
    std::sort(us.begin(), us.end());
    const double gap = us[1] / us[0];
    const bool is_near = gap < 1.01, is_clear = gap > 1.10;
    if ((!is_near || near >= 20) && (!is_clear || clear >= 20)) continue;
    const GemmProblem p = make_problem(pm, pn, pk, scale, out);
    const std::string text = router.explain(p);
    EXPECT_EQ(text.find("near-tie: ") != std::string::npos, is_near) << gap << "\n" << text;
    (is_near ? near : clear) += 1;
    if (is_near && pm > 1) {  // an M below this one that no entry measured: the estimate, no flag
      const std::string between = router.explain(make_problem(pm - 1, pn, pk, scale, out));
      if (between.find("estimated at m=") != std::string::npos)
        EXPECT_EQ(between.find("near-tie: "), std::string::npos) << between;
    }
  }
  EXPECT_EQ(near, 20);
  EXPECT_EQ(clear, 20);
}

TEST(Route, ExplainShowsSourceAndSkips) {
  const Router r = Router::from_file(source_dir() + "/routes/h200.json");
  ASSERT_EQ(r.load_error(), "");
  GemmProblem p = make_problem(64, 4096, 14336, ScaleKind::row);
  p.align = 8;
  const Route route = r.select(p);
  EXPECT_EQ(route.source, Route::Source::heuristic);
  EXPECT_EQ(route.backend, "reference");
  const std::string text = r.explain(p);
  std::printf("%s", text.c_str());
  EXPECT_NE(text.find("source: heuristic"), std::string::npos);
  EXPECT_NE(text.find("skipped: "), std::string::npos);
  EXPECT_NE(text.find("align"), std::string::npos);  // the skip reason names the rule
  if (cuda_device_count() == 0) EXPECT_NE(text.find("no GPU here to compare"), std::string::npos);
  EXPECT_EQ(text.find("probe: "), std::string::npos) << "a heuristic route has no probe line";
  // A shape the table lacks: explain lists what a probe would time (the table's best guesses first).
  const Router h200(build_routing_table(h200_records(), h200_stamp()), measured_on_h200());
  const GemmProblem near = make_problem(16, 4096, 4096, ScaleKind::row);
  const std::string exact_text = h200.explain(near);
  EXPECT_EQ(exact_text.find("probe: "), std::string::npos) << exact_text;
  std::vector<MeasurementRecord> rest;
  for (const MeasurementRecord& rec : h200_records())
    if (!(rec.n == 4096 && rec.k == 4096)) rest.push_back(rec);
  const Router held_out(build_routing_table(rest, h200_stamp()), measured_on_h200());
  const std::string near_text = held_out.explain(near);
  const auto probed = held_out.probe_candidates(near, ProbeOptions{}.top);
  ASSERT_GE(probed.size(), 5u);
  const size_t at = near_text.find("probe: not measured here");
  ASSERT_NE(at, std::string::npos) << near_text;
  std::string want = "time on this GPU:";
  for (size_t i = 0; i < probed.size(); ++i) want += (i ? ", " : " ") + probed[i].first + "/" + probed[i].second;
  EXPECT_NE(near_text.find(want, at), std::string::npos) << near_text;
}

// The probe times what each backend asks for besides the table's guesses: every cuBLASLt rank and
// skinny config, and the decode configs of the smallest token tile that covers M (here with a
// supports() that allows everything, so only the backends' own lists decide).
TEST(Route, ProbeCandidatesIncludeEachBackendsProbeConfigs) {
  const Router router(build_routing_table(h200_records(), h200_stamp()),
                      [](std::string_view, std::string_view, const GemmProblem&) { return std::string(); });
  for (int64_t m : {1, 8, 9, 16, 17, 40, 64}) {
    const GemmProblem p = make_problem(m, 4096, 4096, ScaleKind::row);
    const auto probed = router.probe_candidates(p, 0);
    std::set<std::string> got;
    for (const auto& [b, c] : probed) got.insert(b + "/" + c);
    for (const char* b : {"cublaslt", "skinny"})
      for (const std::string& c : gemm_configs(b)) EXPECT_TRUE(got.count(std::string(b) + "/" + c)) << b << "/" << c;
    const int64_t tile = m <= 8 ? 8 : m <= 16 ? 16 : m <= 32 ? 32 : 64;
    size_t decode = 0;
    for (const std::string& c : gemm_configs("decode")) {
      const bool want = c.rfind("m" + std::to_string(tile) + "_", 0) == 0;
      EXPECT_EQ(got.count("decode/" + c), want ? 1u : 0u) << "m=" << m << " decode/" << c;
      decode += want;
    }
    EXPECT_EQ(decode, 2u) << "m=" << m;
  }
}

// ---- alignment: scales and bias at any element offset, a, b and out at 16 bytes ------------------

// Fake, never dereferenced device addresses (check_scaled_mm and routing touch no device memory),
// 256-byte aligned and far apart: a, b, out, scale_a, scale_b, bias.
char* fake_region(int i) { return reinterpret_cast<char*>(uintptr_t{1} << 40) + (static_cast<uintptr_t>(i) << 32); }

ScaledMmArgs fake_row_args(int64_t m, int64_t n, int64_t k, bool bias, int sa_off, int sb_off, int bias_off,
                           int a_off = 0) {
  ScaledMmArgs args;
  args.scale = ScaleKind::row;
  args.a = TensorView::strided(fake_region(0) + a_off, DType::e4m3, {m, k}, {k + 16, 1});
  args.b = TensorView::contiguous(fake_region(1), DType::e4m3, {n, k});
  args.out = TensorView::contiguous(fake_region(2), DType::bf16, {m, n});
  args.scale_a = TensorView::contiguous(fake_region(3) + 4 * sa_off, DType::f32, {m});
  args.scale_b = TensorView::contiguous(fake_region(4) + 4 * sb_off, DType::f32, {n});
  if (bias) args.bias = TensorView::contiguous(fake_region(5) + 2 * bias_off, DType::bf16, {n});
  return args;
}

// A slice of a larger scale tensor (one expert's, one request's) is only 4-byte aligned; a slice of
// a bias 2-byte. Such a call is the same problem as the aligned one (routing key, table lookup,
// log line) and routes to the same fast backend, never to the reference kernel: N = 4096,
// K = 7168, row scales, M = 1, 2, 8 ran 45x slower when the scale pointers counted in the
// problem's alignment. Without a GPU the router sees only the backends' static rules, which say yes,
// so any route to the reference is the alignment's doing.
TEST(Route, ElementAlignedScalesAndBiasRouteLikeAlignedOnes) {
  const Router r = Router::from_file(source_dir() + "/routes/h200.json");
  ASSERT_EQ(r.load_error(), "");
  for (int64_t m : {1, 2, 8})
    for (int off = 1; off < 4; ++off)
      for (int which = 0; which < 3; ++which) {
        const ScaledMmArgs aligned = fake_row_args(m, 4096, 7168, true, 0, 0, 0);
        const ScaledMmArgs sliced =
            fake_row_args(m, 4096, 7168, true, which == 0 ? off : 0, which == 1 ? off : 0, which == 2 ? off : 0);
        const GemmProblem want = check_scaled_mm(aligned), got = check_scaled_mm(sliced);
        const std::string what = std::string(which == 0 ? "scale_a" : which == 1 ? "scale_b" : "bias") + " offset " +
                                 std::to_string(off) + " elements, m=" + std::to_string(m);
        EXPECT_EQ(got.align, 16) << what;
        EXPECT_TRUE(got == want) << what << ": " << to_string(got) << " vs " << to_string(want);
        EXPECT_EQ(to_string(got), to_string(want)) << what;
        const Route route = r.select(got);
        EXPECT_NE(route.backend, "reference") << what << ": " << route.why;
        EXPECT_EQ(route.backend + "/" + route.config, [&] {
          const Route a = r.select(want);
          return a.backend + "/" + a.config;
        }()) << what;
        EXPECT_NE(gemm_select(got).backend, "reference") << what << ": " << gemm_select(got).why;
        // The slice changes nothing cuBLASLt is asked (on a GPU its heuristic answers for the
        // problem itself, and has no algorithm for some row-scale problems with a bias at M = 1).
        EXPECT_EQ(gemm_supports("cublaslt", "heuristic", got), gemm_supports("cublaslt", "heuristic", want)) << what;
      }
  // A bias at an odd byte address is not a bf16 tensor: rejected, naming it.
  ScaledMmArgs odd = fake_row_args(8, 4096, 7168, true, 0, 0, 0);
  odd.bias.data = fake_region(5) + 1;
  try {
    (void)check_scaled_mm(odd);
    ADD_FAILURE() << "a bias at an odd address was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.category(), ErrorCategory::invalid_argument) << e.what();
    EXPECT_NE(std::string(e.what()).find("bias"), std::string::npos) << e.what();
  }
}

// a, b and out are read by TMA and cuBLASLt in 16-byte units: a view of a that starts inside a row
// (here 8 bytes in) has align 8, and only the reference kernel runs it. The route says so, and
// explain() says why and what to change. A row slice of a matrix with K % 16 == 0 stays aligned.
TEST(Route, MisalignedActivationsRouteToTheReferenceAndExplainWhy) {
  const Router r = Router::from_file(source_dir() + "/routes/h200.json");
  ASSERT_EQ(r.load_error(), "");
  const GemmProblem row_slice = check_scaled_mm(fake_row_args(8, 4096, 7168, false, 0, 0, 0, /*a_off=*/7168 + 16));
  EXPECT_EQ(row_slice.align, 16);
  EXPECT_NE(r.select(row_slice).backend, "reference");
  const GemmProblem p = check_scaled_mm(fake_row_args(8, 4096, 7168, false, 0, 0, 0, /*a_off=*/8));
  EXPECT_EQ(p.align, 8);
  EXPECT_NE(to_string(p).find("align=8"), std::string::npos) << to_string(p);
  const Route route = r.select(p);
  EXPECT_EQ(route.backend, "reference");
  const std::string text = r.explain(p);
  EXPECT_NE(text.find("slow path: the reference kernel"), std::string::npos) << text;
  EXPECT_NE(text.find("align=8"), std::string::npos) << text;
  EXPECT_NE(text.find("a contiguous copy of that operand"), std::string::npos) << text;
  // An aligned problem's explanation has no such line.
  EXPECT_EQ(r.explain(row_slice).find("slow path"), std::string::npos);
}

}  // namespace
}  // namespace fp8route
