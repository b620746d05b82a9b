// fp8route bench: the routed GEMM (scaled_mm through the routing table) against each backend alone,
// side by side in one run, with the one method of include/fp8route/tuning/measure.h. "A backend alone" is that
// backend at its best config for the problem: by default the configs the routing table ranks best
// for the backend (and cuBLASLt's own heuristic choice), with --configs all every config it has.
// With no GPU and as the main job it prints the routing plan from the table instead.

#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fp8route/tuning/env.h"
#include "common/args.h"
#include "common/exit_codes.h"
#include "common/records.h"
#include "common/text.h"
#include "fp8route/tuning/gemm_operands.h"
#include "commands.h"
#include "fp8route/device.h"
#include "fp8route/error.h"
#include "fp8route/gemm.h"
#include "fp8route/route.h"
#include "fp8route/tuning/backends.h"
#include "fp8route/tuning/explain_policy.h"
#include "workload.h"

namespace fp8route::cli {

namespace {

// Every line of bench's tables fits tools::kWidth columns, with the catalog's longest layer names
// and the longest backend/config names (the routed choice is cut to fit only when more than the
// three default backends are compared; the records have it whole).
using tools::kWidth;
using tools::print_wrapped;
using tools::strf;

// The records' fields, in order, for --csv (the same as --json's; "algo" and "first_us" are empty
// where a record has none).
const std::vector<std::string> kCsvColumns = {"model", "layer", "tp", "m", "n", "k", "scale", "out", "backend",
                                              "config", "us", "tflops", "weight_gbps", "routed", "algo",
                                              "first_us"};

// A backend's column in the layer table: its speed-up, "1.234x", under its name.
size_t ratio_width(const std::string& backend) { return std::max<size_t>(7, backend.size()); }
std::string ratio(double x) { return strf(x < 100 ? "%.3fx" : "%.0fx", x); }

// `s` cut to `width` columns ("~" marks the cut).
std::string fit(const std::string& s, size_t width) {
  return s.size() <= width ? s : s.substr(0, width > 0 ? width - 1 : 0) + "~";
}

struct Timed {
  std::string backend, config;
  double us = 0;
  double first_us = 0;  // re-checked: this config's time in the first pass (0: not re-checked)
};

struct Result {
  tools::LayerShape layer;
  GemmProblem p;
  Timed routed;
  std::map<std::string, Timed> alone;  // per backend, its fastest config
  double first_ratio = 0;  // re-checked: routed / best single backend in the first pass (0: not re-checked)
};

// The fastest of `alone` (backend/config in *who when given).
double best_alone(const std::map<std::string, Timed>& alone, std::string* who = nullptr) {
  double best = INFINITY;
  for (const auto& [b, t] : alone)
    if (t.us < best) {
      best = t.us;
      if (who) *who = b + "/" + t.config;
    }
  return best;
}

// The routed time and each backend's fastest config from one measure_gemms of `choices` (the routed
// entry point first); a choice that failed is reported and left out.
void fill(Result& r, const Route& route, const std::vector<std::pair<std::string, std::string>>& choices,
          const std::vector<timing::Measurement>& ms) {
  FP8ROUTE_CHECK_CAT(ms[0].error.empty(), ErrorCategory::cuda_error, "routed " << to_string(r.p) << ": " << ms[0].error);
  r.routed = {route.backend, route.config, ms[0].median_us};
  r.alone.clear();
  for (size_t i = 1; i < choices.size(); ++i) {
    const auto& [b, c] = choices[i];
    if (!ms[i].error.empty()) {
      std::printf("  %s/%s failed on %s: %s\n", b.c_str(), c.c_str(), to_string(r.p).c_str(), ms[i].error.c_str());
      continue;
    }
    if (!r.alone.count(b) || ms[i].median_us < r.alone[b].us) r.alone[b] = {b, c, ms[i].median_us};
  }
}

const char* band_of(int64_t m) { return m <= 16 ? "decode (M<=16)" : m < 1024 ? "middle (17-1023)" : "prefill (>=1024)"; }

// The configs that stand for `backend` alone on p: the table's best-ranked ones of that backend (up
// to two, plus the backend's own choice when it ranks its configs per problem: cuBLASLt's
// heuristic), or every supported config (all, or when the table ranks none of the backend's configs
// for p).
std::vector<std::string> configs_for(const std::string& backend, const GemmProblem& p, const Router& router,
                                     bool all) {
  std::vector<std::string> out;
  const std::vector<std::string> have = gemm_configs(backend);
  if (!all) {
    for (const auto& [b, c] : router.candidates(p))  // a table of another build may name other configs
      if (b == backend && out.size() < 2 && std::find(have.begin(), have.end(), c) != have.end() &&
          gemm_supports(b, c, p).empty())
        out.push_back(c);
    if (const tuning::BackendInfo b = tuning::backend(backend); b.ranks_configs_per_problem) {
      const std::string& own = b.configs.front();
      if (std::find(out.begin(), out.end(), own) == out.end() && gemm_supports(backend, own, p).empty())
        out.push_back(own);
    }
    if (!out.empty()) return out;
  }
  for (const std::string& c : have)
    if (gemm_supports(backend, c, p).empty()) out.push_back(c);
  return out;
}

std::string python_for_plot() {
  if (const auto python = env::get("FP8ROUTE_PYTHON")) return *python;
  const auto src = env::get("FP8ROUTE_SOURCE_DIR");
  const std::string venv = src.value_or(FP8ROUTE_SOURCE_DIR) + "/build/venv/bin/python";
  return std::filesystem::exists(venv) ? venv : "python3";
}

int plot(const std::string& json_path, const std::string& png) {
  const auto src = env::get("FP8ROUTE_SOURCE_DIR");
  const std::string script = src.value_or(FP8ROUTE_SOURCE_DIR) + "/bench/plot_bench.py";
  const std::string cmd = "'" + python_for_plot() + "' '" + script + "' '" + json_path + "' -o '" + png + "'";
  std::printf("plotting: %s\n", cmd.c_str());
  std::fflush(stdout);
  const int status = std::system(cmd.c_str());
  const int rc = status != -1 && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  if (rc == 0) return tools::kExitOk;
  // plot_bench.py exits 3 without matplotlib; the shell 127 without the Python named.
  const bool missing = rc == 3 || rc == 127;
  std::fprintf(stderr, "fp8route bench: the plot failed (exit %d%s); the measurements are in %s and the command "
                       "above redraws them%s\n", rc, missing ? ": no Python or no matplotlib" : "", json_path.c_str(),
               missing ? " once matplotlib is installed" : "");
  return missing ? tools::kExitPlot : tools::kExitFailure;
}

// No GPU: what the table would run for each layer and M of the workload, as measured on its GPU.
int print_plan(const Workload& w, const Router& router) {
  print_wrapped(strf("no GPU here (%s): the routing plan of the table, as measured on %s (%s), for %s",
                     cuda_unavailable_reason().c_str(), router.table().stamp.gpu.c_str(),
                     router.table().stamp.date.c_str(), w.what.c_str()));
  std::printf("\n");
  if (!router.load_error().empty()) {
    print_wrapped("table not loaded (" + router.load_error() + "): the heuristic rules");
    std::printf("\n");
  }
  for (const tools::LayerShape& l : w.layers)
    for (ScaleKind sk : w.scales) {
      std::printf("%s/%s tp%d n=%lld k=%lld %s\n", l.model.c_str(), l.layer.c_str(), l.tp, (long long)l.n,
                  (long long)l.k, std::string(name(sk)).c_str());
      // Runs of M with the same choice, one line each.
      size_t i = 0;
      while (i < w.m_grid.size()) {
        const Route r = router.select(make_problem(w.m_grid[i], l.n, l.k, sk, w.out));
        size_t j = i;
        while (j + 1 < w.m_grid.size()) {
          const Route q = router.select(make_problem(w.m_grid[j + 1], l.n, l.k, sk, w.out));
          if (q.backend != r.backend || q.config != r.config || q.source != r.source) break;
          ++j;
        }
        std::printf("  M %5lld..%-5lld  %-13s %-46s (%s)\n", (long long)w.m_grid[i], (long long)w.m_grid[j],
                    r.backend.c_str(), r.config.c_str(), std::string(name(r.source)).c_str());
        i = j + 1;
      }
    }
  std::printf("\n`fp8route explain --m M --n N --k K --scale S` shows the measured candidates of any one choice.\n");
  return 0;
}

void print_summary(const std::vector<Result>& results, const std::vector<std::string>& backends) {
  std::printf("\nSpeed-up of routed over each backend alone (geometric mean of backend us / routed us; > 1: routed faster)\n");
  std::printf("%-7s %-17s %5s", "scale", "M band", "n");
  for (const std::string& b : backends) std::printf(" %12s", b.c_str());
  std::printf(" %18s\n", "worst vs best one");
  std::map<std::pair<std::string, std::string>, std::vector<const Result*>> groups;
  for (const Result& r : results) groups[{std::string(name(r.p.scale)), band_of(r.p.m)}].push_back(&r);
  for (const auto& [g, rs] : groups) {
    std::printf("%-7s %-17s %5zu", g.first.c_str(), g.second.c_str(), rs.size());
    for (const std::string& b : backends) {
      double log_sum = 0;
      int n = 0;
      for (const Result* r : rs)
        if (r->alone.count(b)) log_sum += std::log(r->alone.at(b).us / r->routed.us), ++n;
      if (n) std::printf(" %7.3fx %3d", std::exp(log_sum / n), n);
      else std::printf(" %12s", "-");
    }
    double worst = 0;
    for (const Result* r : rs) worst = std::max(worst, r->routed.us / best_alone(r->alone));
    std::printf(" %17.3fx\n", worst);
  }
  int slow = 0, same = 0, rechecked = 0;
  for (const Result& r : results) {
    std::string who;
    const double best = best_alone(r.alone, &who);
    rechecked += r.first_ratio > 0;
    if (r.routed.us > 1.03 * best) {
      if (!slow++) std::printf("\nRouted more than 3%% slower than the best single backend:\n");
      // The routed call ran the very config that was fastest alone: not a routing loss but two
      // timings of one kernel in one run (routed entry and explicit call) that differ.
      const bool same_kernel = who == r.routed.backend + "/" + r.routed.config;
      same += same_kernel;
      std::printf("  %s/%s tp%d  %s m=%lld n=%lld k=%lld: %.3fx%s%s\n", r.layer.model.c_str(), r.layer.layer.c_str(),
                  r.layer.tp, std::string(name(r.p.scale)).c_str(), (long long)r.p.m, (long long)r.p.n,
                  (long long)r.p.k, r.routed.us / best, same_kernel ? " [same config]" : "",
                  r.first_ratio > 0 ? " [re-checked]" : "");
      std::printf("    routed     %9.2f us  %s/%s\n", r.routed.us, r.routed.backend.c_str(), r.routed.config.c_str());
      std::printf("    best alone %9.2f us  %s\n", best, who.c_str());
    }
  }
  if (rechecked) {
    std::printf("\n");
    print_wrapped(strf("%d of %zu problems were more than 3%% slower than the best single backend in the first pass; "
                       "each was timed again (--recheck: routed and every config not slower than it, side by side, "
                       "more graph instances), and the times above and below are that re-check's",
                       rechecked, results.size()));
  }
  std::printf("\n");
  print_wrapped(strf("%d of %zu problems: routed more than 3%% slower than the best single backend", slow,
                     results.size()) +
                (same ? strf(" (%d of them ran the same config as the best, timed twice in one run: [same config])",
                             same)
                      : ""));
}

// --json and --csv: the records so far, each file written whole and renamed over the last
// (tools::write_file_atomically), so that a run cut short (a time limit, ^C) leaves every layer it
// finished in valid files.
void write_records(const std::string& json_path, const std::string& csv_path, const nlohmann::json& records) {
  if (!json_path.empty()) tools::write_file_atomically(json_path, tools::json_text(records), "--json");
  if (!csv_path.empty()) tools::write_file_atomically(csv_path, tools::csv_text(records, kCsvColumns), "--csv");
}

}  // namespace

int run_bench(const BenchOptions& opt) {
  const Workload w = select_workload(opt.shapes, "llama-3.1-8b", /*dedupe=*/true);
  FP8ROUTE_CHECK(opt.configs == "table" || opt.configs == "all", "--configs: table or all, got '" << opt.configs << "'");
  const std::vector<std::string> backends = tools::parse_names(opt.backends);
  for (const std::string& b : backends) gemm_configs(b);  // unknown names fail before any work
  if (!opt.table.empty()) load_default_table(opt.table);
  std::shared_ptr<const Router> router = default_router();

  if (const ExplainPolicy policy = explain_policy(); policy.as_measured) {
    if (!opt.main_job) FP8ROUTE_FAIL(ErrorCategory::unsupported, "bench needs a GPU: " << policy.no_gpu_reason);
    const std::string path = opt.table.empty() ? default_table_path() : opt.table;
    return print_plan(w, Router::from_file(path, policy.supports));
  }
  std::string json_path = opt.json_path;
  if (json_path.empty() && !opt.plot_path.empty()) json_path = opt.plot_path + ".json";
  if (!json_path.empty() || !opt.csv_path.empty())  // a bad path fails now, not after the run
    write_records(json_path, opt.csv_path, nlohmann::json::array());
  if (!router->load_error().empty())
    print_wrapped("warning: routing table not loaded (" + router->load_error() + "); routed = the heuristic rules");

  const DeviceInfo& dev = device_info(0);
  const size_t total = w.layers.size() * w.m_grid.size() * w.scales.size();
  print_wrapped(strf("fp8route bench on %s (%d SMs): %s, %zu layers x %zu M x %zu scale kinds = %zu problems, %s out",
                     dev.name.c_str(), dev.sm_count, w.what.c_str(), w.layers.size(), w.m_grid.size(),
                     w.scales.size(), total, std::string(dtype_name(w.out)).c_str()));
  print_wrapped(strf("routed = scaled_mm() through the table (%s, %s); each backend alone at its best %s",
                     router->table().stamp.gpu.c_str(), router->table().stamp.date.c_str(),
                     opt.configs == "all" ? "config (every config timed)"
                                          : "configs by the table (+ cuBLASLt's heuristic)"));
  print_wrapped(strf("method: CUDA-graph replay, weights rotated through >= 3x L2, median of %d replays%s, all of a "
                     "problem interleaved%s",
                     opt.shapes.reps,
                     opt.shapes.instances > 1
                         ? (" (mean over " + std::to_string(opt.shapes.instances) + " graph instances)").c_str()
                         : "",
                     opt.screen_pct > 0 ? ("; screened first (--screen " + std::to_string(opt.screen_pct) +
                                           ": configs over " + std::to_string(opt.screen_pct) +
                                           "% behind the fastest in one quick round are not timed further)")
                                              .c_str()
                                        : ""));
  print_wrapped("per layer: routed's time, then for each backend its time alone / routed's (> 1: routed faster; "
                "'-': it cannot run the problem), then the routed backend/config");
  std::printf("\n");
  const timing::MeasureOptions mo = measure_options(opt.shapes);
  timing::MeasureOptions recheck = mo;  // --recheck's finer measurement
  recheck.instances = std::max(opt.recheck_instances, mo.instances);
  if (opt.probe != "off") {
    ProbeOptions po;
    po.m_grid = w.m_grid, po.top = static_cast<size_t>(opt.probe_top), po.always = opt.probe == "always";
    po.reps = opt.shapes.reps, po.instances = opt.shapes.instances;
    router = std::make_shared<const Router>(router->with_measurements(probe_workload(w, *router, po)));
    std::printf("the routed GEMM below routes by these timings\n\n");
    set_default_router(router);  // what the routed scaled_mm() below runs
  }
  std::vector<Result> results;
  nlohmann::json records = nlohmann::json::array();
  const auto t0 = std::chrono::steady_clock::now();
  size_t done = 0, timed_fully = 0, timed_all = 0;
  // The table's row: scale, M, routed us, a speed-up column per backend, the routed choice last.
  size_t row_width = 2 + 6 + 1 + 6 + 1 + 9 + 2;
  for (const std::string& b : backends) row_width += 1 + ratio_width(b);
  const size_t choice_width = kWidth > row_width ? kWidth - row_width : 16;
  for (const tools::LayerShape& l : w.layers) {
    const double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("%s/%s tp%d  n=%lld k=%lld  [%zu/%zu problems done%s]\n", l.model.c_str(), l.layer.c_str(), l.tp,
                (long long)l.n, (long long)l.k, done, total,
                done ? strf(", eta %.0fs", el / done * (total - done)).c_str() : "");
    std::printf("  %-6s %6s %9s", "scale", "M", "routed us");
    for (const std::string& b : backends) std::printf(" %*s", int(ratio_width(b)), b.c_str());
    std::printf("  %s\n", "routed backend/config");
    for (int64_t m : w.m_grid)
      for (ScaleKind sk : w.scales) {
        const GemmProblem p = make_problem(m, l.n, l.k, sk, w.out);
        const int sets = timing::rotation_sets(timing::gemm_call_bytes(p), mo);
        const timing::GemmOperandSets ops = timing::make_gemm_operands(p, sets, 0xBE7Cull * (done + 1));
        Result r{l, p, {}, {}};
        const Route route = router->select(p);
        // The routed entry point and every candidate config side by side, replays interleaved
        // (measure.h): the H200's clocks drift by ~10% within seconds under load, and the same
        // kernel timed first in a slow phase would otherwise look 10% slower than itself.
        std::vector<std::pair<std::string, std::string>> choices = {{"", ""}};
        for (const std::string& b : backends)
          for (const std::string& c : configs_for(b, p, *router, opt.configs == "all")) choices.emplace_back(b, c);
        if (opt.screen_pct > 0) {  // timing::screen_gemms: routed and each backend's fastest always stay
          timed_all += choices.size();
          choices = timing::screen_gemms(ops, choices, mo, opt.screen_pct).kept;
          timed_fully += choices.size();
        }
        const std::vector<timing::Measurement> ms = timing::measure_gemms(ops, choices, mo);
        fill(r, route, choices, ms);
        const Result first = r;
        if (const double best = best_alone(r.alone); opt.recheck_instances > 0 && r.routed.us > 1.03 * best) {
          // A first-pass miss is timed again: the routed call and every choice that was not slower
          // than it (each backend's fastest among them), side by side with more graph instances. The
          // best of the first pass is the minimum of many noisy timings and the stream-K graphs run
          // at one of a few speeds per instance (measure.h), so an independent, finer measurement of
          // the candidates decides; both passes are printed and kept in the JSON.
          const std::vector<bool> keep = timing::screen_keep(choices, ms, 100 * (r.routed.us / best - 1));
          std::vector<std::pair<std::string, std::string>> again;
          for (size_t i = 0; i < choices.size(); ++i)
            if (keep[i] && ms[i].error.empty()) again.push_back(choices[i]);
          fill(r, route, again, timing::measure_gemms(ops, again, recheck));
          r.first_ratio = first.routed.us / best;
          r.routed.first_us = first.routed.us;
          for (auto& [b, t] : r.alone)
            for (size_t i = 0; i < choices.size(); ++i)
              if (choices[i] == std::pair{b, t.config}) t.first_us = ms[i].median_us;
        }
        ++done;
        std::printf("  %-6s %6lld %9.2f", std::string(name(sk)).c_str(), (long long)m, first.routed.us);
        for (const std::string& b : backends)
          std::printf(" %*s", int(ratio_width(b)),
                      first.alone.count(b) ? ratio(first.alone.at(b).us / first.routed.us).c_str() : "-");
        std::printf("  %s\n", fit(first.routed.backend + "/" + first.routed.config, choice_width).c_str());
        if (r.first_ratio > 0) {
          std::string who;
          const double best = best_alone(r.alone, &who);
          std::printf("    re-checked with %d graph instances: routed %.2f us (first pass %.2f us), %.3fx the best "
                      "alone\n", recheck.instances, r.routed.us, r.routed.first_us, r.routed.us / best);
          std::printf("      first pass %.3fx; best alone: %s %.2f us\n", r.first_ratio, who.c_str(), best);
        }
        std::fflush(stdout);
        auto record = [&](const Timed& t, bool routed) {
          records.push_back({{"model", l.model}, {"layer", l.layer}, {"tp", l.tp}, {"m", p.m}, {"n", p.n}, {"k", p.k},
                             {"scale", std::string(name(p.scale))}, {"out", std::string(dtype_name(p.out))},
                             {"backend", t.backend}, {"config", t.config}, {"us", t.us},
                             {"tflops", timing::tflops(p, t.us)}, {"weight_gbps", timing::weight_gbps(p, t.us)},
                             {"routed", routed}});
          if (std::string what = gemm_describe(t.backend, t.config, p); !what.empty()) records.back()["algo"] = what;
          if (t.first_us > 0) records.back()["first_us"] = t.first_us;  // --recheck: the first pass's time
        };
        record(r.routed, true);
        for (const auto& [b, t] : r.alone) record(t, false);
        results.push_back(std::move(r));
      }
    write_records(json_path, opt.csv_path, records);
  }
  print_summary(results, backends);
  if (opt.screen_pct > 0)
    std::printf("--screen %d: %zu of %zu candidate timings (routed included) kept for the full measurement\n",
                opt.screen_pct, timed_fully, timed_all);
  if (!json_path.empty()) std::printf("wrote %zu records to %s\n", records.size(), json_path.c_str());
  if (!opt.csv_path.empty()) std::printf("wrote %zu records to %s\n", records.size(), opt.csv_path.c_str());
  if (!opt.plot_path.empty()) return plot(json_path, opt.plot_path);
  return 0;
}

}  // namespace fp8route::cli
