// fp8route tune: measure every supported (backend, config) on every problem of a workload with
// the one method of include/fp8route/tuning/measure.h (all configs of a problem interleaved, after the quick
// screen of timing::screen_gemms unless --screen 0), append each
// problem's measurements to a raw file as it finishes (so an interrupted run resumes where it stopped), and write the routing table built
// from them, stamped with this machine.
//
// Raw file: JSON lines. A measurement: {"scale","out","n","k","m","backend","config","us","min_us",
// "max_us"}, plus "algo" for a cuBLASLt config (gemm_describe: the algorithm its rank named in this
// run; not read back); after a problem's last measurement, {"done": true, "scale","out","n","k","m"}. On resume,
// problems with a "done" line are skipped; measurements of an unfinished problem are dropped and it
// is measured again; a torn last line (the run was killed mid-write) is ignored. With --screen the
// "done" line also has "screen_pct" and "screened_out": [[backend, config, quick median us], ...],
// the configs the quick first round dropped (timing::screen_gemms). Their quick times go into the
// table's measurements too (read_tune_raw does the same on resume): they never win a breakpoint
// (PCT% behind in their round), but nearest-shape and between-M routing rank every config of a
// problem, and a config missing at one M would drop out of those rankings. With --final (a near-tie
// timed again) the "done" line has "final_pct", "final_instances", "final": [[backend, config],
// ...], the configs whose measurement lines hold that round's times, and "final_full_us": their
// full-round times, in the same order (how far the rounds' times moved; not read back).

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/args.h"
#include "fp8route/tuning/gemm_operands.h"
#include "commands.h"
#include "fp8route/device.h"
#include "fp8route/error.h"
#include "fp8route/gemm.h"
#include "fp8route/route.h"
#include "fp8route/tuning/stamp_json.h"
#include "fp8route/tuning/tune_raw.h"
#include "workload.h"

namespace fp8route::cli {

namespace {

std::string scale_name(ScaleKind k) { return std::string(name(k)); }
std::string out_name(DType d) { return std::string(dtype_name(d)); }

}  // namespace

int run_tune(const TuneOptions& opt) {
  const Workload w = select_workload(opt.shapes, "all", /*dedupe=*/true);
  const std::vector<std::string> backends = tools::parse_names(opt.backends);
  for (const std::string& b : backends) gemm_configs(b);  // unknown names fail now, not mid-run
  std::string raw = opt.raw_path;
  if (raw.empty()) {
    raw = opt.table_path;
    if (raw.size() > 5 && raw.substr(raw.size() - 5) == ".json") raw.resize(raw.size() - 5);
    raw += ".raw.jsonl";
  }
  TuneRawFile st = opt.fresh ? TuneRawFile{} : read_tune_raw(raw);
  if (opt.build_only) {
    FP8ROUTE_CHECK_CAT(st.stamp.has_value(), ErrorCategory::io_error, raw << ": no stamp line (not a tune raw file?)");
    const RoutingTable table = build_routing_table(st.records, *st.stamp);
    save_routing_table(table, opt.table_path);
    std::printf("wrote %s: %zu entries from %zu measurements of %zu finished problems in %s%s\n", opt.table_path.c_str(),
                table.entries.size(), st.records.size(), st.finished.size(), raw.c_str(),
                st.torn ? " (its torn last line ignored)" : "");
    return 0;
  }
  FP8ROUTE_CHECK_CAT(cuda_device_count() > 0, ErrorCategory::unsupported, "tune needs a GPU: " << cuda_unavailable_reason());
  // A torn last line (the run was killed mid-write) is cut off before appending.
  if (st.torn) std::filesystem::resize_file(raw, static_cast<uintmax_t>(st.good_bytes));
  std::set<TuneRawFile::Problem> done(st.finished.begin(), st.finished.end());
  std::ofstream out(raw, opt.fresh ? std::ios::trunc : std::ios::app);
  FP8ROUTE_CHECK_CAT(out.good(), ErrorCategory::io_error, raw << ": cannot open the raw measurement file");
  if (st.stamp && !opt.fresh && !(*st.stamp == stamp_this_machine()))
    std::printf("warning: %s was started on %s (%s); resuming here mixes two machines' timings (--fresh starts over)\n",
                raw.c_str(), st.stamp->gpu.c_str(), st.stamp->date.c_str());
  if (opt.fresh || !st.stamp) {
    out << nlohmann::json{{"stamp", stamp_this_machine()}}.dump() << "\n";
  }

  const size_t total = w.layers.size() * w.m_grid.size() * w.scales.size();
  const DeviceInfo& dev = device_info(0);
  std::printf("fp8route tune on %s (%d SMs): %s, %zu distinct shapes x %zu M x %zu scale kinds = %zu problems\n"
              "method: every supported config of a problem interleaved%s%s\n"
              "raw measurements: %s%s\n",
              dev.name.c_str(), dev.sm_count, w.what.c_str(), w.layers.size(), w.m_grid.size(), w.scales.size(),
              total,
              opt.screen_pct > 0 ? ("; a quick round first drops those over " + std::to_string(opt.screen_pct) +
                                    "% behind the fastest (--screen)").c_str()
                                 : "",
              opt.final_pct > 0 && opt.final_instances > opt.shapes.instances
                  ? ("; configs within " + std::to_string(opt.final_pct) + "% of the best timed again with " +
                     std::to_string(opt.final_instances) + " graph instances (--final)")
                        .c_str()
                  : "",
              raw.c_str(),
              done.empty() ? "" : (" (resuming: " + std::to_string(done.size()) + " problems already done)").c_str());
  const timing::MeasureOptions mo = measure_options(opt.shapes);
  size_t seen = 0, measured = 0, failures = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (const tools::LayerShape& l : w.layers)
    for (int64_t m : w.m_grid)
      for (ScaleKind sk : w.scales) {
        ++seen;
        const GemmProblem p = make_problem(m, l.n, l.k, sk, w.out);
        if (done.count({p.scale, p.out, p.n, p.k, p.m})) continue;
        const int sets = timing::rotation_sets(timing::gemm_call_bytes(p), mo);
        const timing::GemmOperandSets ops = timing::make_gemm_operands(p, sets, 0x7E57ull * seen);
        std::vector<std::pair<std::string, std::string>> choices;
        for (const std::string& b : backends)
          for (const std::string& c : gemm_configs(b))
            if (gemm_supports(b, c, p).empty()) choices.emplace_back(b, c);
        // --screen: a quick round first; configs far behind are not measured further (their quick
        // times go into the "done" line and, as measurements, into the table).
        nlohmann::json screened_out = nlohmann::json::array();
        std::vector<MeasurementRecord> problem;  // this problem's records for the table
        if (opt.screen_pct > 0) {
          const timing::Screen sc = timing::screen_gemms(ops, choices, mo, opt.screen_pct);
          for (size_t i = 0; i < sc.dropped.size(); ++i) {
            screened_out.push_back({sc.dropped[i].first, sc.dropped[i].second, sc.dropped_us[i]});
            problem.push_back({p.scale, p.out, p.n, p.k, p.m, sc.dropped[i].first, sc.dropped[i].second,
                               sc.dropped_us[i]});
          }
          choices = sc.kept;
        }
        // Every config of the problem side by side, replays interleaved (measure.h): clock drift
        // during the run moves them alike instead of favouring whichever ran in a fast phase.
        std::vector<timing::Measurement> ms = timing::measure_gemms(ops, choices, mo);
        // --final: a near-tie (configs within final_pct% of the best) timed once more, only those
        // side by side and with more graph instances: the mix a bench of the routed call runs in,
        // and less noise where the choice is close (docs/routing.md).
        std::vector<std::pair<std::string, std::string>> final_round;
        std::vector<double> full_round_us;  // the final round's configs, their full-round times
        if (opt.final_pct > 0 && opt.final_instances > mo.instances) {
          std::vector<double> us;
          std::vector<bool> failed;
          for (const timing::Measurement& r : ms) us.push_back(r.median_us), failed.push_back(!r.error.empty());
          const std::vector<size_t> near = timing::final_round(us, failed, opt.final_pct);
          std::vector<std::pair<std::string, std::string>> again;
          for (size_t i : near) again.push_back(choices[i]);
          // As many timed replays in all as the full round (at least 5 per instance): the instances
          // average out a stream-K graph's speed, and the round costs about one more full round of
          // the near-ties only.
          timing::MeasureOptions mf = mo;
          mf.instances = opt.final_instances;
          mf.reps = std::max(5, mo.reps / opt.final_instances);
          const std::vector<timing::Measurement> ms2 = again.empty() ? std::vector<timing::Measurement>{}
                                                                    : timing::measure_gemms(ops, again, mf);
          for (size_t j = 0; j < near.size(); ++j)
            if (ms2[j].error.empty()) {
              full_round_us.push_back(ms[near[j]].median_us);
              ms[near[j]] = ms2[j], final_round.push_back(again[j]);
            }
        }
        int timed = 0;
        for (size_t i = 0; i < choices.size(); ++i) {
          const auto& [b, c] = choices[i];
          const timing::Measurement& r = ms[i];
          if (!r.error.empty()) {
            std::printf("  %s/%s failed on %s: %s\n", b.c_str(), c.c_str(), to_string(p).c_str(), r.error.c_str());
            ++failures;
            continue;
          }
          nlohmann::json line{{"scale", scale_name(p.scale)}, {"out", out_name(p.out)}, {"n", p.n}, {"k", p.k},
                              {"m", p.m}, {"backend", b}, {"config", c}, {"us", r.median_us},
                              {"min_us", r.min_us}, {"max_us", r.max_us}};
          if (std::string what = gemm_describe(b, c, p); !what.empty()) line["algo"] = what;
          out << line.dump() << "\n";
          problem.push_back({p.scale, p.out, p.n, p.k, p.m, b, c, r.median_us});
          ++timed;
        }
        // The raw file keeps what was measured; the table ranks the final round's times first, as
        // read_tune_raw does (route/tune_raw.h).
        settle_final_round(problem, final_round, opt.final_pct);
        double best = 0;
        std::string best_name;
        for (const MeasurementRecord& r : problem)
          if (best_name.empty() || r.us < best) best = r.us, best_name = r.backend + "/" + r.config;
        st.records.insert(st.records.end(), problem.begin(), problem.end());
        nlohmann::json done_line{{"done", true}, {"scale", scale_name(p.scale)}, {"out", out_name(p.out)}, {"n", p.n},
                                 {"k", p.k}, {"m", p.m}};
        if (opt.screen_pct > 0) done_line["screen_pct"] = opt.screen_pct, done_line["screened_out"] = screened_out;
        if (!final_round.empty()) {
          done_line["final_pct"] = opt.final_pct;
          done_line["final_instances"] = opt.final_instances;
          done_line["final"] = final_round;
          done_line["final_full_us"] = full_round_us;
        }
        out << done_line.dump() << "\n";
        out.flush();
        ++measured;
        const double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        const size_t left = total - seen;
        std::printf("[%zu/%zu %.0fs, eta %.0fs] %-30s %-44s %2d configs%s, best %8.2f us %s\n", seen, total, el,
                    el / measured * left, (l.model + "/" + l.layer + " tp" + std::to_string(l.tp)).c_str(),
                    to_string(p).c_str(), timed,
                    (screened_out.empty() ? std::string() : " (+" + std::to_string(screened_out.size()) + " screened out)")
                        .append(final_round.empty() ? "" : ", " + std::to_string(final_round.size()) + " timed again")
                        .c_str(),
                    best, best_name.c_str());
        std::fflush(stdout);
      }
  FP8ROUTE_CHECK_CAT(out.good(), ErrorCategory::io_error, raw << ": writing failed");
  const RoutingTable table = build_routing_table(st.records, stamp_this_machine());
  save_routing_table(table, opt.table_path);
  std::printf("wrote %s: %zu entries from %zu measurements (%zu problems measured now, %zu resumed%s)\n",
              opt.table_path.c_str(), table.entries.size(), st.records.size(), measured, total - measured,
              failures ? (", " + std::to_string(failures) + " measurements failed").c_str() : "");
  return failures ? 1 : 0;
}

}  // namespace fp8route::cli
