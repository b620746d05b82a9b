// Automatic probing between probed M, offline: with each catalog model held out of a table built
// from the recorded H200 measurements (routes/h200-measurements.json), writes per held-out point
// what Router::probe_candidates draws from (the held-out router's ranked candidates that ran on the
// H200, each backend's probe_configs, the heuristic's choice), the router's choice after a probe at
// the 13 powers of two 1-4096 (recorded times standing in for the timings), and each config's tile
// along M. bench/autoprobe_between_m.py reads it and compares probe grids, candidate counts and
// between-M rules (docs/routing.md, "Automatic probing"). CPU only.
//
//   build/release/probe_dump -o /tmp/dump.json [--records routes/h200-measurements.json]

#include <CLI/CLI.hpp>

#include <algorithm>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/exit_codes.h"
#include "common/shapes.h"
#include "common/table_sources.h"
#include "fp8route/error.h"
#include "fp8route/gemm.h"
#include "fp8route/route.h"
#include "fp8route/version.h"
#include "fp8route/tuning/backends.h"
#include "fp8route/tuning/data_files.h"

using namespace fp8route;

namespace {

using Point = std::tuple<ScaleKind, DType, int64_t, int64_t, int64_t>;  // scale, out, n, k, m
using Times = std::map<std::pair<std::string, std::string>, double>;    // (backend, config) -> us

// The stamp of routes/h200.json: the H200 the measurements were made on.
TableStamp h200_stamp() { return {"NVIDIA H200", 132, "13.0", "13.1", FP8ROUTE_VERSION, "2026-11-30"}; }

std::map<Point, Times> points_of(const std::vector<MeasurementRecord>& records) {
  std::map<Point, Times> out;
  for (const MeasurementRecord& r : records) {
    auto [it, fresh] = out[{r.scale, r.out, r.n, r.k, r.m}].try_emplace({r.backend, r.config}, r.us);
    if (!fresh) it->second = std::min(it->second, r.us);
  }
  return out;
}

// supports() as the H200 answered it: a (backend, config) runs a problem iff it was measured on it.
SupportsFn measured(std::shared_ptr<const std::map<Point, Times>> points) {
  return [points](std::string_view backend, std::string_view config, const GemmProblem& p) -> std::string {
    const auto it = points->find({p.scale, p.out, p.n, p.k, p.m});
    if (it != points->end() && it->second.count({std::string(backend), std::string(config)})) return "";
    return "not measured on the H200 for this problem";
  };
}

int run(int argc, char** argv) {
  std::string out_path, records_path;
  CLI::App app{"Probe candidates of the recorded H200 measurements, each catalog model held out (JSON)"};
  app.add_option("-o,--output", out_path, "the JSON file to write")->required();
  app.add_option("--records", records_path, "the records (default: routes/h200-measurements.json)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? tools::kExitOk : tools::kExitUsage;
  }
  if (records_path.empty()) records_path = find_data_file("routes/h200-measurements.json");
  FP8ROUTE_CHECK_CAT(!records_path.empty(), ErrorCategory::io_error, data_file_not_found("routes/h200-measurements.json"));
  const std::vector<MeasurementRecord> records = tools::read_records_json(records_path);
  const auto all = std::make_shared<const std::map<Point, Times>>(points_of(records));
  const SupportsFn sup = measured(all);
  const tools::ShapeCatalog catalog = tools::load_catalog(tools::default_catalog_path());
  std::set<std::string> models;
  for (const auto& l : catalog.layers) models.insert(l.model);

  nlohmann::json out = nlohmann::json::array();
  for (const std::string& model : models) {
    // The model's (N, K) at every TP of the catalog, and a router of the other shapes' records.
    std::vector<tools::LayerShape> layers;
    for (const auto& l : catalog.layers)
      if (l.model == model) layers.push_back(l);
    std::set<std::pair<int64_t, int64_t>> shapes;
    for (int tp : catalog.tp)
      for (const auto& l : tools::at_tp(layers, tp)) shapes.insert({l.n, l.k});
    std::vector<MeasurementRecord> rest;
    for (const MeasurementRecord& r : records)
      if (!shapes.count({r.n, r.k})) rest.push_back(r);
    const Router router(build_routing_table(rest, h200_stamp()), sup);

    for (const auto& [pt, times] : *all) {
      const auto [scale, od, pn, pk, pm] = pt;
      if (!shapes.count({pn, pk})) continue;
      const GemmProblem p = make_problem(pm, pn, pk, scale, od);
      nlohmann::json cand = nlohmann::json::array(), probed = nlohmann::json::array();
      for (const auto& [b, c] : router.candidates(p)) {
        if (!sup(b, c, p).empty()) continue;
        cand.push_back({b, c});
        if (cand.size() >= 12) break;
      }
      for (const tuning::BackendInfo& b : tuning::backends())
        for (const std::string& cn : tuning::probe_configs(b.name, p))
          if (sup(b.name, cn, p).empty()) probed.push_back({b.name, cn});
      const GemmChoice h = gemm_select(p);
      nlohmann::json heur = sup(h.backend, h.config, p).empty() ? nlohmann::json{h.backend, h.config} : nlohmann::json();
      // The router's own choice at M after a probe of the 13 powers of two (top 5, automatic
      // probing's settings otherwise), the timings being the recorded ones: autoprobe_between_m.py
      // replays that grid (POW2) and checks its "current" rule against it. (The default grid has
      // every recorded M on it.)
      nlohmann::json routed;
      ProbeOptions probe = AutoProbeConfig{}.probe;
      probe.m_grid = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096};
      if (std::find(probe.m_grid.begin(), probe.m_grid.end(), pm) == probe.m_grid.end()) {
        std::vector<MeasurementRecord> recs;
        for (int64_t gm : probe.m_grid) {
          const GemmProblem g = make_problem(gm, pn, pk, scale, od);
          const Times& gt = all->at({scale, od, pn, pk, gm});
          for (const auto& c : router.probe_candidates(g, probe.top))
            recs.push_back({scale, od, pn, pk, gm, c.first, c.second, gt.at(c)});
        }
        const Route r = router.with_measurements(recs).select(p);
        routed = {r.backend, r.config};
      }
      out.push_back({{"model", model}, {"scale", std::string(name(scale))}, {"n", pn}, {"k", pk}, {"m", pm},
                     {"cand", cand}, {"probe", probed}, {"heur", heur}, {"routed", routed}});
    }
  }
  nlohmann::json tiles = nlohmann::json::object();
  for (const auto& pt : *all)
    for (const auto& [bc, us] : pt.second) tiles[bc.first + "/" + bc.second] = tuning::m_tile(bc.first, bc.second);
  std::ofstream f(out_path);
  f << nlohmann::json{{"points", out}, {"tiles", tiles}}.dump();
  FP8ROUTE_CHECK_CAT(f.good(), ErrorCategory::io_error, out_path << ": cannot be written");
  return tools::kExitOk;
}

}  // namespace

int main(int argc, char** argv) {
  return tools::run_reporting_errors("probe_dump", [&] { return run(argc, argv); });
}
