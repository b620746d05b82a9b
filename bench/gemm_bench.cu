// GEMM benchmark: every backend and config that supports a problem, side by side in one run, on
// the models.json layer shapes and an M grid, with the one method of src/timing/measure.h
// (CUDA-graph replay, operands rotated through >= 3x L2, median of >= 20). Prints a table per
// problem (best config of each backend, the ratio of the best non-cuBLASLt backend to cuBLASLt)
// and writes every measurement as a JSON record (--json) or a CSV row (--csv). --floor adds the
// weight-read floor: a kernel that only reads the N x K weight bytes, timed the same way, as backend
// "floor", config "read". With "routed" among the backends it ends with routed against the best
// single backend per problem; --autoprobe times routed as a user's eager scaled_mm gets it, automatic
// probing on, and reports each shape's one-time probe. Exit codes as the fp8route tool's
// (tools/common/exit_codes.h).

#include <CLI/CLI.hpp>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/args.h"
#include "common/cli_validators.h"
#include "common/exit_codes.h"
#include "common/records.h"
#include "common/text.h"
#include "fp8route/tuning/gemm_operands.h"
#include "fp8route/tuning/measure.h"
#include "common/shapes.h"
#include "fp8route/tuning/cuda_check.h"
#include "fp8route/buffer.h"
#include "fp8route/device.h"
#include "fp8route/error.h"
#include "fp8route/gemm.h"
#include "fp8route/route.h"

using namespace fp8route;

namespace {

using tools::print_wrapped;

struct Row {
  std::string model, layer;
  int tp;
  GemmProblem p;
  std::string backend, config;
  timing::Measurement m;
  double first_us = 0;  // re-checked: this choice's time in the first pass (0: not re-checked)
  std::string source;   // routed: the route's source (exact, nearest, heuristic)
};

// One problem of the routed summary: routed against the fastest choice of any other backend.
struct Verdict {
  const tools::LayerShape* layer = nullptr;
  GemmProblem p;
  double routed_us = 0, best_us = 0;
  std::string routed, best;  // backend/config
  std::string source;        // the route's
  double first_ratio = 0;    // re-checked: routed / best in the first pass (0: not re-checked)
  double ratio() const { return routed_us / best_us; }
};

// What automatic probing did for one (layer shape, scale kind) in this run.
struct ProbeSeen {
  bool recorded = false;  // autoprobe_records() has a record of it (else: the table has the shape)
  AutoProbeRecord rec;
  double first_call_s = 0;  // wall time of the shape's first eager routed call (the probe included)
};

constexpr int64_t kMaxDim = (int64_t{1} << 31) - 1;  // M, N, K of a GEMM (gemm.h)

// The JSON records' fields, in order, for --csv (a record's other keys follow: "first_us" in the
// records of a re-checked problem, "source" in the routed ones; tools::csv_text).
const std::vector<std::string> kCsvColumns = {"model", "layer", "tp", "m", "n", "k", "scale", "out", "bias",
                                              "backend", "config", "us", "min_us", "max_us", "sets", "tflops",
                                              "weight_gbps"};

std::string problem_name(const tools::LayerShape& l, const GemmProblem& p) {
  return l.model + "/" + l.layer + " tp" + std::to_string(l.tp) + " " + std::string(name(p.scale)) +
         " m=" + std::to_string(p.m) + " n=" + std::to_string(p.n) + " k=" + std::to_string(p.k);
}

// "M band" of the routed summary: on the automatic probe's grid, between two of its points, or
// beyond its largest (routed from there).
std::string grid_band(int64_t m, const std::vector<int64_t>& grid) {
  if (std::find(grid.begin(), grid.end(), m) != grid.end()) return "on the probe grid";
  if (!grid.empty() && m > *std::max_element(grid.begin(), grid.end())) return "above the grid";
  return "between grid points";
}

void print_routed_summary(const std::vector<Verdict>& vs, double tol_pct, bool autoprobe, int recheck) {
  if (vs.empty()) return;
  const double tol = 1 + tol_pct / 100;
  std::printf("\n");
  print_wrapped("routed against the best single backend (the fastest config of any other backend timed alone), "
                "tolerance " + tools::strf("%g", tol_pct) + "%:");
  const std::vector<int64_t> grid = autoprobe_config().probe.m_grid;
  // Groups: every problem, per scale kind, and (with --autoprobe) per M band of the probe grid.
  std::vector<std::pair<std::string, std::vector<const Verdict*>>> groups = {{"all", {}}};
  std::map<std::string, std::vector<const Verdict*>> by;
  for (const Verdict& v : vs) {
    groups[0].second.push_back(&v);
    by[std::string(name(v.p.scale))].push_back(&v);
    if (autoprobe) by[std::string(name(v.p.scale)) + ", M " + grid_band(v.p.m, grid)].push_back(&v);
  }
  for (auto& g : by) groups.push_back(g);
  std::printf("  %-40s %8s %7s %6s %9s %9s\n", "problems", "n", "within", "over", "worst", "geomean");
  for (const auto& [what, g] : groups) {
    size_t over = 0;
    double worst = 0, log_sum = 0;
    for (const Verdict* v : g) {
      over += v->ratio() > tol;
      worst = std::max(worst, v->ratio());
      log_sum += std::log(v->ratio());
    }
    std::printf("  %-40s %8zu %7zu %6zu %8.3fx %8.4fx\n", what.c_str(), g.size(), g.size() - over, over, worst,
                std::exp(log_sum / g.size()));
  }
  const auto worst = std::max_element(vs.begin(), vs.end(), [](const Verdict& a, const Verdict& b) {
    return a.ratio() < b.ratio();
  });
  std::printf("  worst: %.3fx, %s\n", worst->ratio(), problem_name(*worst->layer, worst->p).c_str());
  size_t over = 0, same = 0, rechecked = 0;
  for (const Verdict& v : vs) {
    rechecked += v.first_ratio > 0;
    if (v.ratio() <= tol) continue;
    if (!over++) std::printf("\nrouted more than %g%% slower than the best single backend:\n", tol_pct);
    const bool same_config = v.routed == v.best;  // one kernel timed twice: not a routing loss
    same += same_config;
    std::printf("  %s: %.3fx%s\n", problem_name(*v.layer, v.p).c_str(), v.ratio(), same_config ? " [same config]" : "");
    std::printf("    routed     %9.2f us  %s (%s route)\n", v.routed_us, v.routed.c_str(), v.source.c_str());
    std::printf("    best alone %9.2f us  %s\n", v.best_us, v.best.c_str());
    if (v.first_ratio > 0) std::printf("    [re-checked; the first pass had %.3fx]\n", v.first_ratio);
  }
  std::printf("\n");
  std::string line = std::to_string(vs.size() - over) + " of " + std::to_string(vs.size()) + " problems within " +
                     tools::strf("%g", tol_pct) + "% of the best single backend, " + std::to_string(over) + " over";
  if (same) line += " (" + std::to_string(same) + " of them ran the same config as the best: [same config])";
  if (recheck > 0)
    line += "; " + std::to_string(rechecked) + " problems over " + tools::strf("%g", tol_pct) +
            "% in the first pass were timed again (--recheck " + std::to_string(recheck) +
            ") and the times above are the re-check's";
  print_wrapped(line);
  size_t not_exact = 0;
  for (const Verdict& v : vs) not_exact += v.source != "exact";
  if (autoprobe && not_exact)
    print_wrapped("warning: " + std::to_string(not_exact) +
                  " problems were routed without timings of their shape (route source not 'exact': the shape's "
                  "probe was skipped or failed; see the automatic probing report)");
}

void print_probe_report(const std::vector<tools::LayerShape>& layers, const std::vector<std::string>& scales,
                        const std::map<std::tuple<std::string, int64_t, int64_t>, ProbeSeen>& seen,
                        double total_first_s) {
  const AutoProbeConfig cfg = autoprobe_config();
  std::printf("\n");
  print_wrapped("automatic probing, the one-time cost per layer shape (autoprobe_records(): the seconds spent "
                "probing, the timings made, the M probed; 'table': the routing table has the shape, nothing probed; "
                "first call: the wall time of the shape's first eager routed call, the probe included):");
  std::printf("  %6s %6s %-6s %-8s %8s %7s %3s %12s %8s  %s\n", "n", "k", "scale", "outcome", "seconds", "timings",
              "M", "first call s", "layer s", "layer");
  double total = 0;
  std::map<std::string, size_t> outcomes;
  std::vector<std::string> notes;
  for (const tools::LayerShape& l : layers) {
    const std::string label = l.model + "/" + l.layer + " tp" + std::to_string(l.tp);
    double layer_s = 0;
    for (const std::string& s : scales)
      if (const auto it = seen.find({s, l.n, l.k});
          it != seen.end() && it->second.recorded && it->second.rec.outcome == AutoProbeRecord::Outcome::probed)
        layer_s += it->second.rec.seconds;
    total += layer_s;
    bool first = true;
    for (const std::string& s : scales) {
      const auto it = seen.find({s, l.n, l.k});
      if (it == seen.end()) continue;
      const ProbeSeen& ps = it->second;
      const std::string o = ps.recorded ? std::string(name(ps.rec.outcome)) : "table";
      ++outcomes[o];
      const bool timed = ps.recorded && (ps.rec.outcome == AutoProbeRecord::Outcome::probed ||
                                         ps.rec.outcome == AutoProbeRecord::Outcome::cached);
      std::printf("  %6lld %6lld %-6s %-8s %8s %7s %3s %12.2f", (long long)l.n, (long long)l.k, s.c_str(), o.c_str(),
                  timed ? tools::strf("%.2f", ps.rec.seconds).c_str() : "-",
                  timed ? std::to_string(ps.rec.timings).c_str() : "-",
                  timed ? std::to_string(ps.rec.m.size()).c_str() : "-", ps.first_call_s);
      if (first) std::printf(" %8.2f  %s", layer_s, label.c_str());
      std::printf("\n");
      first = false;
      if (ps.recorded && ps.rec.outcome == AutoProbeRecord::Outcome::cached)
        notes.push_back(label + " " + s + ": read from the probe cache " + ps.rec.file +
                        " (its seconds are those recorded there, not a cost of this run)");
      else if (ps.recorded && !ps.rec.note.empty())
        notes.push_back(label + " " + s + ": " + o + ": " + ps.rec.note);
    }
  }
  std::string counts;
  for (const auto& [o, n] : outcomes) counts += (counts.empty() ? "" : ", ") + std::to_string(n) + " " + o;
  std::printf("\n");
  print_wrapped("total: " + tools::strf("%.2f", total) + " s probing in this process (" + counts +
                "); the shapes' first calls " + tools::strf("%.2f", total_first_s) + " s; budget " + tools::strf("%g", cfg.budget_s) +
                " s (FP8ROUTE_AUTOPROBE_BUDGET); " + std::to_string(cfg.probe.m_grid.size()) + " M per shape, " +
                std::to_string(cfg.probe.instances) + " graph instances");
  for (const std::string& n : notes) print_wrapped(n, 2);
  if (outcomes.count("skipped") || outcomes.count("failed"))
    print_wrapped("warning: " + std::to_string(outcomes["skipped"] + outcomes["failed"]) +
                  " shapes were skipped or failed (above): they are routed by the table's nearest entries, not by "
                  "timings of their own; raise FP8ROUTE_AUTOPROBE_BUDGET for a skip for budget");
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"fp8route GEMM benchmark: every backend and config side by side on models.json shapes"};
  std::string models, tps = "1", ms, scales = "tensor,row,block", backends = tools::timed_backends();
  std::string out_name = "bf16", json_path, csv_path, catalog = tools::default_catalog_path(), shapes;
  bool bias = false, with_floor = false, autoprobe = false, interleave = false;
  std::string probe_ms;
  int reps = 20, instances = 1, screen_pct = 0, recheck = 0;
  double tolerance = 5;
  int64_t scale_offset = 0;
  app.add_option("--model", models, "comma-separated model names (default: all in the catalog)");
  app.add_option("--tp", tps, "tensor-parallel degrees, comma-separated")->capture_default_str();
  app.add_option("--m", ms, "M values, comma-separated (default: the catalog's m_grid)");
  app.add_option("--shapes", shapes, "explicit N:K pairs instead of models, e.g. 4096:14336,2112:7168");
  app.add_option("--scale", scales, "scale kinds")
      ->capture_default_str()
      ->check(tools::name_list({"tensor", "row", "block"}));
  app.add_option("--backend", backends,
                 "backends to time (reference is slow; add it by name; 'routed' times the routed scaled_mm)")
      ->capture_default_str()
      ->check(tools::name_list([] {
        std::vector<std::string> names = gemm_backends();
        names.push_back("routed");
        return names;
      }()));
  app.add_option("--scale-offset", scale_offset,
                 "scale_a, scale_b and bias start this many elements into their buffers (a slice of a larger tensor)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1024));
  app.add_option("--out", out_name, "output dtype bf16 or f16")
      ->capture_default_str()
      ->check(CLI::IsMember({"bf16", "f16"}));
  app.add_flag("--bias", bias, "add a bias vector");
  app.add_flag("--floor", with_floor, "also time a kernel that only reads the weight (backend floor, config read)");
  app.add_option("--reps", reps, "timed graph replays (median reported)")
      ->capture_default_str()
      ->check(CLI::Range(1, 100000));
  app.add_option("--instances", instances, "graph instances per choice, their medians averaged (measure.h)")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  app.add_flag("--interleave", interleave,
               "time a problem's choices side by side, replays interleaved, instead of one after another");
  app.add_option("--screen", screen_pct,
                 "one quick round first; configs over PCT% behind the fastest are not timed further (0: off)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1000));
  app.add_flag("--autoprobe", autoprobe,
               "automatic probing on: routed (added) is an eager scaled_mm after its first call probed the shape");
  app.add_option("--probe-m", probe_ms,
                 "with --autoprobe: the M grid the automatic probe times (default: AutoProbeConfig's 21 M)");
  app.add_option("--recheck", recheck,
                 "time a problem again with N graph instances when routed is over --tolerance (0: off)")
      ->capture_default_str()
      ->check(CLI::Range(0, 64));
  app.add_option("--tolerance", tolerance, "routed summary: percent over the best single backend counted as a miss")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 100.0));
  app.add_option("--catalog", catalog, "shape catalog")->capture_default_str();
  app.add_option("--json", json_path, "write every measurement here");
  app.add_option("--csv", csv_path, "write every measurement here as CSV: a header row, one row per --json record");
  app.footer("Examples:\n"
             "  gemm_bench --model llama-3.1-8b --m 1,16,128,1024 --json gemm.json\n"
             "  gemm_bench --shapes 4096:14336 --scale row --backend cublaslt,cutlass_sm90,routed --csv gemm.csv\n"
             "  gemm_bench --catalog shapes/heldout.json --tp 1,2 --scale row,block --autoprobe --interleave "
             "--screen 25 --recheck 8\n"
             "\nExit codes: 0 success; 1 a failure while running; 2 an invalid argument or file, or no GPU");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? tools::kExitOk : tools::kExitUsage;  // a bad option, like the checks below
  }

  return tools::run_reporting_errors("gemm_bench", [&] {
    // Without --autoprobe "routed" times the table's routing, the route its row names (route.h).
    set_autoprobe(false);
    // Every option is checked before the GPU is looked for.
    const std::vector<int64_t> tp_list = tools::parse_int_list(tps, "--tp", 1, 1024);
    const std::vector<int64_t> m_list = ms.empty() ? std::vector<int64_t>{} : tools::parse_int_list(ms, "--m", 1, kMaxDim);
    const std::vector<int64_t> probe_grid =
        probe_ms.empty() ? std::vector<int64_t>{} : tools::parse_int_list(probe_ms, "--probe-m", 1, kMaxDim);
    std::vector<std::pair<int64_t, int64_t>> nk_list;
    for (const std::string& nk : tools::parse_names(shapes)) {
      const auto colon = nk.find(':');
      FP8ROUTE_CHECK(colon != std::string::npos, "--shapes: expected N:K, got '" << nk << "'");
      nk_list.emplace_back(tools::parse_int_list(nk.substr(0, colon), "--shapes (N)", 1, kMaxDim).at(0),
                           tools::parse_int_list(nk.substr(colon + 1), "--shapes (K)", 1, kMaxDim).at(0));
    }
    std::vector<std::string> backend_list = tools::parse_names(backends);
    if (autoprobe && std::find(backend_list.begin(), backend_list.end(), "routed") == backend_list.end())
      backend_list.push_back("routed");
    const bool routed_timed = std::find(backend_list.begin(), backend_list.end(), "routed") != backend_list.end();
    if (!json_path.empty()) tools::check_writable(json_path, "--json");
    if (!csv_path.empty()) tools::check_writable(csv_path, "--csv");
    FP8ROUTE_CHECK_CAT(cuda_device_count() > 0, ErrorCategory::unsupported,
                       "gemm_bench needs a GPU: " << cuda_unavailable_reason());
    if (autoprobe) set_autoprobe(true);  // FP8ROUTE_AUTOPROBE=0 or not; cache folder and budget from the environment
    if (autoprobe && !probe_grid.empty()) {
      AutoProbeConfig cfg = autoprobe_config();
      cfg.probe.m_grid = probe_grid;
      set_autoprobe_config(cfg);
    }
    const tools::ShapeCatalog cat = tools::load_catalog(catalog);
    // Layers: one per distinct (n, k), labelled by the first model/layer that has it.
    std::vector<tools::LayerShape> layers;
    std::set<std::pair<int64_t, int64_t>> seen;
    if (!shapes.empty()) {
      for (const auto& [n, k] : nk_list)
        layers.push_back({"custom", std::to_string(n) + ":" + std::to_string(k), "none", 1, n, k});
    } else {
      const std::vector<std::string> want = tools::parse_names(models);
      for (int64_t tp : tp_list)
        for (const tools::LayerShape& l : tools::at_tp(cat.layers, static_cast<int>(tp))) {
          if (!want.empty() && std::find(want.begin(), want.end(), l.model) == want.end()) continue;
          if (seen.insert({l.n, l.k}).second) layers.push_back(l);
        }
    }
    const std::vector<int64_t> m_grid = ms.empty() ? cat.m_grid : m_list;
    const std::vector<std::string> scale_list = tools::parse_names(scales);
    const DType out = parse_dtype(out_name, "--out");
    timing::MeasureOptions opt;
    opt.reps = reps;
    opt.instances = instances;
    timing::MeasureOptions recheck_opt = opt;
    recheck_opt.instances = std::max(recheck, instances);

    const DeviceInfo& dev = device_info(0);
    std::printf("fp8route gemm_bench on %s (%d SMs): %zu layer shapes x %zu M x %s scales\n",
                dev.name.c_str(), dev.sm_count, layers.size(), m_grid.size(), scales.c_str());
    std::string method = "method: CUDA-graph replay, weights rotated through >= 3x L2, median of " +
                         std::to_string(reps) + " replays";
    if (instances > 1) method += " (mean over " + std::to_string(instances) + " graph instances)";
    method += interleave ? ", a problem's choices interleaved" : ", one choice after another";
    if (screen_pct > 0) method += "; screened first (--screen " + std::to_string(screen_pct) + ")";
    print_wrapped(method);
    if (routed_timed) {
      const std::shared_ptr<const Router> router = default_router();
      const TableStamp& st = router->table().stamp;
      print_wrapped("routed = scaled_mm() through the routing table " + default_table_path() + " (" + st.gpu + ", " +
                    st.date + ", " + std::to_string(router->table().entries.size()) + " entries)" +
                    (router->load_error().empty() ? "" : "; NOT LOADED: " + router->load_error()));
    }
    if (autoprobe) {
      const AutoProbeConfig cfg = autoprobe_config();
      size_t cached_files = 0;
      std::error_code ec;
      if (!cfg.cache_dir.empty() && std::filesystem::is_directory(cfg.cache_dir + "/probes", ec))
        for (const auto& e : std::filesystem::recursive_directory_iterator(cfg.cache_dir + "/probes", ec))
          cached_files += e.is_regular_file(ec) && e.path().extension() == ".json";
      print_wrapped("automatic probing on: each shape's first eager routed call (untimed, before any timing of the "
                    "shape) probes it when the table has no entry for it; probe cache " +
                    (cfg.cache_dir.empty() ? std::string("none (timings kept in this process)") : cfg.cache_dir) +
                    " (" + std::to_string(cached_files) + " files there now); budget " + tools::strf("%g", cfg.budget_s) +
                    " s (FP8ROUTE_AUTOPROBE_BUDGET)");
      if (cached_files)
        print_wrapped("note: shapes the probe cache already holds are read, not probed: their cost is not measured "
                      "by this run (use an empty FP8ROUTE_CACHE_DIR to measure it)");
    }
    std::printf("per problem, each backend's fastest config (vs cublaslt: cuBLASLt's time / its own)\n");
    // Rows fit 120 columns with the longest backend/config name (a routed CUTLASS config, 61).
    std::printf("    %-12s %9s %8s %7s %11s  %s\n", "backend", "us", "TFLOP/s", "GB/s", "vs cublaslt", "config");
    const size_t total = layers.size() * m_grid.size() * scale_list.size();
    size_t done = 0, timed_all = 0, timed_fully = 0;
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<Row> rows;
    std::vector<Verdict> verdicts;
    std::map<std::tuple<std::string, int64_t, int64_t>, ProbeSeen> probes;  // (scale, n, k)
    double first_calls_s = 0;
    size_t records_seen = 0;  // autoprobe_records() reported so far
    cudaStream_t warm_stream = nullptr;
    if (autoprobe) FP8ROUTE_CUDA_CHECK(cudaStreamCreateWithFlags(&warm_stream, cudaStreamNonBlocking));
    for (const tools::LayerShape& l : layers) {
      for (int64_t m : m_grid) {
        for (const std::string& sk : scale_list) {
          const GemmProblem p = make_problem(m, l.n, l.k, parse_scale_kind(sk), out, bias);
          const int sets = timing::rotation_sets(timing::gemm_call_bytes(p), opt);
          const timing::GemmOperandSets o = timing::make_gemm_operands(p, sets, 0x5EEDull * (done + 1), false, scale_offset);
          std::vector<std::string> probe_lines;
          if (autoprobe) {
            // The routed call's first eager call of the problem, untimed: at the first problem of a
            // shape the table lacks this is where automatic probing times the shape (never under the
            // graph capture below). Its wall time includes the probe.
            const auto c0 = std::chrono::steady_clock::now();
            scaled_mm(o.args[0], warm_stream);
            FP8ROUTE_CUDA_CHECK(cudaStreamSynchronize(warm_stream));
            const double call_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - c0).count();
            const auto key = std::make_tuple(sk, l.n, l.k);
            const bool first = !probes.count(key);
            ProbeSeen& ps = probes[key];
            if (first) ps.first_call_s = call_s, first_calls_s += call_s;
            const std::vector<AutoProbeRecord> recs = autoprobe_records();
            for (; records_seen < recs.size(); ++records_seen) {
              const AutoProbeRecord& r = recs[records_seen];
              ProbeSeen& to = probes[{std::string(name(r.scale)), r.n, r.k}];
              to.recorded = true, to.rec = r;
              std::string what = "autoprobe " + std::string(name(r.scale)) + " n=" + std::to_string(r.n) +
                                 " k=" + std::to_string(r.k) + ": " + std::string(name(r.outcome));
              if (r.outcome == AutoProbeRecord::Outcome::probed || r.outcome == AutoProbeRecord::Outcome::cached)
                what += " " + std::to_string(r.m.size()) + " M, " + std::to_string(r.timings) + " timings, " +
                        tools::strf("%.2f s", r.seconds) +
                        (r.outcome == AutoProbeRecord::Outcome::cached ? " (when it was probed)" : "");
              what += "; first call " + tools::strf("%.2f s", call_s);
              if (!r.note.empty()) what += "; " + r.note;
              probe_lines.push_back(what);
            }
            if (first && !ps.recorded) probe_lines.push_back("autoprobe: not probed (the table has this shape)");
          }
          // The choices: every supported config of each backend; "routed" the routed entry point
          // (empty backend), its row's config naming the route it took.
          std::vector<std::pair<std::string, std::string>> choices;
          for (const std::string& b : backend_list) {
            if (b == "routed") {
              choices.emplace_back("", "");
              continue;
            }
            for (const std::string& c : gemm_configs(b))
              if (gemm_supports(b, c, p).empty()) choices.emplace_back(b, c);
          }
          Route rt;
          if (routed_timed) rt = default_router()->select(check_scaled_mm(o.args[0]));
          if (screen_pct > 0) {  // timing::screen_gemms: routed and each backend's fastest always stay
            timed_all += choices.size();
            choices = timing::screen_gemms(o, choices, opt, screen_pct).kept;
            timed_fully += choices.size();
          }
          std::vector<timing::Measurement> meas;
          if (interleave) {
            meas = timing::measure_gemms(o, choices, opt);
          } else {
            for (const auto& [b, c] : choices) {
              timing::Measurement x;
              try {
                x = timing::measure_gemm(o, b, c, opt);
              } catch (const Error& e) {
                x.error = e.what();
              }
              meas.push_back(x);
            }
          }
          const size_t first_row = rows.size();
          std::vector<size_t> row_of(choices.size(), SIZE_MAX);  // choice -> its row
          for (size_t i = 0; i < choices.size(); ++i) {
            const auto& [b, c] = choices[i];
            const bool routed = b.empty();
            if (!meas[i].error.empty()) {
              std::printf("  %s/%s failed on %s: %s\n", routed ? "routed" : b.c_str(), c.c_str(),
                          to_string(p).c_str(), meas[i].error.c_str());
              continue;
            }
            Row r{l.model, l.layer, l.tp, p, routed ? "routed" : b, routed ? rt.backend + "/" + rt.config : c,
                  meas[i], 0, routed ? std::string(name(rt.source)) : ""};
            row_of[i] = rows.size();
            rows.push_back(std::move(r));
          }
          // Routed against the fastest choice of any other backend (the floor is not a GEMM).
          const auto judge = [&](const std::vector<size_t>& which, Verdict& v) {
            v.routed_us = v.best_us = 0;
            for (size_t i : which) {
              const Row& r = rows[i];
              if (r.backend == "routed") {
                v.routed_us = r.m.median_us, v.routed = r.config, v.source = r.source;
              } else if (v.best_us == 0 || r.m.median_us < v.best_us) {
                v.best_us = r.m.median_us, v.best = r.backend + "/" + r.config;
              }
            }
            return v.routed_us > 0 && v.best_us > 0;
          };
          std::vector<size_t> problem_rows;
          for (size_t i = first_row; i < rows.size(); ++i) problem_rows.push_back(i);
          Verdict v;
          v.layer = &l, v.p = p;
          const bool judged = judge(problem_rows, v);
          if (judged && recheck > 0 && v.ratio() > 1 + tolerance / 100) {
            // A first-pass miss is timed again at once on the same operands: routed and every choice
            // that was not slower than it, side by side with more graph instances (fp8route bench
            // --recheck): the first pass's best is the minimum of many noisy timings.
            const std::vector<bool> keep = timing::screen_keep(choices, meas, 100 * (v.ratio() - 1));
            std::vector<std::pair<std::string, std::string>> again;
            std::vector<size_t> again_rows;
            for (size_t i = 0; i < choices.size(); ++i)
              if (keep[i] && row_of[i] != SIZE_MAX) again.push_back(choices[i]), again_rows.push_back(row_of[i]);
            const std::vector<timing::Measurement> m2 = timing::measure_gemms(o, again, recheck_opt);
            std::vector<size_t> judged_again;
            for (size_t j = 0; j < again.size(); ++j) {
              if (!m2[j].error.empty()) continue;
              Row& r = rows[again_rows[j]];
              r.first_us = r.m.median_us, r.m = m2[j];
              judged_again.push_back(again_rows[j]);
            }
            const double first_ratio = v.ratio();
            if (judge(judged_again, v)) v.first_ratio = first_ratio;
            else judge(problem_rows, v);  // the re-check could not time routed and another: keep the first pass
          }
          if (judged) verdicts.push_back(v);
          if (with_floor) {
            Row r{l.model, l.layer, l.tp, p, "floor", "read", {}, 0, ""};
            r.m = timing::measure_read_floor(o, opt);
            rows.push_back(r);
          }
          ++done;
          const double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
          std::printf("[%zu/%zu, eta %.0fs] %s/%s tp%d  %s\n", done, total, el / done * (total - done),
                      l.model.c_str(), l.layer.c_str(), l.tp, to_string(p).c_str());
          for (const std::string& line : probe_lines) print_wrapped(line, 4);
          std::map<std::string, const Row*> best;  // per backend, its fastest row
          for (size_t i = first_row; i < rows.size(); ++i)
            if (!best.count(rows[i].backend) || rows[i].m.median_us < best[rows[i].backend]->m.median_us)
              best[rows[i].backend] = &rows[i];
          const double lt = best.count("cublaslt") ? best["cublaslt"]->m.median_us : 0;
          for (const auto& [b, r] : best) {
            char vs[32] = "";
            if (lt > 0 && b != "cublaslt") std::snprintf(vs, sizeof vs, "%.3fx", lt / r->m.median_us);
            std::printf("    %-12s %9.2f %8.1f %7.0f %11s  %s\n", b.c_str(), r->m.median_us,
                        timing::tflops(p, r->m.median_us), timing::weight_gbps(p, r->m.median_us), vs,
                        r->config.c_str());
          }
          if (judged) {
            std::printf("    routed / best single backend %.3fx%s (%s route)\n", v.ratio(),
                        v.ratio() > 1 + tolerance / 100 ? tools::strf(" OVER %g%%", tolerance).c_str() : "", v.source.c_str());
            if (v.first_ratio > 0)
              std::printf("    re-checked with %d graph instances: the first pass had %.3fx\n", recheck_opt.instances,
                          v.first_ratio);
          }
          std::fflush(stdout);
        }
      }
    }
    if (warm_stream) cudaStreamDestroy(warm_stream);
    if (!json_path.empty() || !csv_path.empty()) {
      nlohmann::json j = nlohmann::json::array();
      for (const Row& r : rows) {
        j.push_back({{"model", r.model}, {"layer", r.layer}, {"tp", r.tp}, {"m", r.p.m}, {"n", r.p.n},
                     {"k", r.p.k}, {"scale", std::string(name(r.p.scale))}, {"out", std::string(dtype_name(r.p.out))},
                     {"bias", r.p.bias}, {"backend", r.backend}, {"config", r.config},
                     {"us", r.m.median_us}, {"min_us", r.m.min_us}, {"max_us", r.m.max_us}, {"sets", r.m.sets},
                     {"tflops", timing::tflops(r.p, r.m.median_us)}, {"weight_gbps", timing::weight_gbps(r.p, r.m.median_us)}});
        if (r.first_us > 0) j.back()["first_us"] = r.first_us;
        if (!r.source.empty()) j.back()["source"] = r.source;
      }
      if (!json_path.empty()) tools::write_file_atomically(json_path, tools::json_text(j), "--json");
      if (!csv_path.empty()) tools::write_file_atomically(csv_path, tools::csv_text(j, kCsvColumns), "--csv");
      for (const std::string& path : {json_path, csv_path})
        if (!path.empty()) std::printf("wrote %zu records to %s\n", rows.size(), path.c_str());
    }
    if (screen_pct > 0)
      std::printf("--screen %d: %zu of %zu timings (routed included) kept for the full measurement\n", screen_pct,
                  timed_fully, timed_all);
    print_routed_summary(verdicts, tolerance, autoprobe, recheck);
    if (autoprobe) print_probe_report(layers, scale_list, probes, first_calls_s);
    return tools::kExitOk;
  });
}
