// fp8route tune: measure every supported (backend, config) on every problem of a workload with
// the one method of src/bench/measure.h (all configs of a problem interleaved), append each
// problem's measurements to a raw file as it finishes (so an interrupted run resumes where it stopped), and write the routing table built
// from them, stamped with this machine.
//
// Raw file: JSON lines. A measurement: {"scale","out","n","k","m","backend","config","us","min_us",
// "max_us"}; after a problem's last measurement, {"done": true, "scale","out","n","k","m"}. On resume,
// problems with a "done" line are skipped; measurements of an unfinished problem are dropped and it
// is measured again; a torn last line (the run was killed mid-write) is ignored.

#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/args.h"
#include "bench/gemm_operands.h"
#include "commands.h"
#include "fp8route/device.h"
#include "fp8route/error.h"
#include "fp8route/gemm.h"
#include "fp8route/route.h"
#include "workload.h"

namespace fp8route::cli {

namespace {

using ProblemKey = std::tuple<std::string, std::string, int64_t, int64_t, int64_t>;  // scale, out, n, k, m

ProblemKey key_of(const GemmProblem& p) {
  return {std::string(name(p.scale)), std::string(dtype_name(p.out)), p.n, p.k, p.m};
}

struct RawState {
  std::vector<MeasurementRecord> records;  // of finished problems
  std::set<ProblemKey> done;
  int torn = 0;
};

RawState read_raw(const std::string& path) {
  RawState st;
  std::ifstream f(path);
  if (!f.good()) return st;
  std::map<ProblemKey, std::vector<MeasurementRecord>> pending;
  std::string line;
  for (int no = 1; std::getline(f, line); ++no) {
    if (line.empty()) continue;
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
      if (j.contains("stamp")) continue;  // the machine the file was started on
      const ProblemKey key{j.at("scale").get<std::string>(), j.at("out").get<std::string>(), j.at("n").get<int64_t>(),
                           j.at("k").get<int64_t>(), j.at("m").get<int64_t>()};
      if (j.value("done", false)) {
        st.done.insert(key);
        for (MeasurementRecord& r : pending[key]) st.records.push_back(std::move(r));
        pending.erase(key);
        continue;
      }
      pending[key].push_back({parse_scale_kind(std::get<0>(key)), parse_dtype(std::get<1>(key), "out"), std::get<2>(key),
                              std::get<3>(key), std::get<4>(key), j.at("backend").get<std::string>(),
                              j.at("config").get<std::string>(), j.at("us").get<double>()});
    } catch (const std::exception& e) {
      // Only the last line can be torn by an interrupted write; anything else is a damaged file.
      if (f.peek() != EOF)
        FP8ROUTE_FAIL(ErrorCategory::io_error, path << ":" << no << ": not a tune record (" << e.what()
                                                    << "); use --fresh to start over");
      ++st.torn;
    }
  }
  return st;
}

}  // namespace

int run_tune(const TuneOptions& opt) {
  FP8ROUTE_CHECK_CAT(cuda_device_count() > 0, ErrorCategory::unsupported, "tune needs a GPU: " << cuda_unavailable_reason());
  const Workload w = select_workload(opt.shapes, "all", /*dedupe=*/true);
  const std::vector<std::string> backends = bench::parse_names(opt.backends);
  for (const std::string& b : backends) gemm_configs(b);  // unknown names fail now, not mid-run
  std::string raw = opt.raw_path;
  if (raw.empty()) {
    raw = opt.table_path;
    if (raw.size() > 5 && raw.substr(raw.size() - 5) == ".json") raw.resize(raw.size() - 5);
    raw += ".raw.jsonl";
  }
  RawState st = opt.fresh ? RawState{} : read_raw(raw);
  std::ofstream out(raw, opt.fresh ? std::ios::trunc : std::ios::app);
  FP8ROUTE_CHECK_CAT(out.good(), ErrorCategory::io_error, raw << ": cannot open the raw measurement file");
  // A torn last line gets a newline so the next record starts on its own line.
  if (st.torn) out << "\n";
  if (opt.fresh || (st.done.empty() && st.records.empty())) {
    const TableStamp s = stamp_this_machine();
    out << nlohmann::json{{"stamp", {{"gpu", s.gpu}, {"sm_count", s.sm_count}, {"cuda", s.cuda}, {"cublaslt", s.cublaslt},
                                     {"fp8route", s.fp8route}, {"date", s.date}}}}.dump()
        << "\n";
  }

  const size_t total = w.layers.size() * w.m_grid.size() * w.scales.size();
  const DeviceInfo& dev = device_info(0);
  std::printf("fp8route tune on %s (%d SMs): %s, %zu distinct shapes x %zu M x %zu scale kinds = %zu problems\n"
              "raw measurements: %s%s\n",
              dev.name.c_str(), dev.sm_count, w.what.c_str(), w.layers.size(), w.m_grid.size(), w.scales.size(),
              total, raw.c_str(),
              st.done.empty() ? "" : (" (resuming: " + std::to_string(st.done.size()) + " problems already done)").c_str());
  bench::MeasureOptions mo;
  mo.reps = opt.shapes.reps;
  size_t seen = 0, measured = 0, failures = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (const bench::LayerShape& l : w.layers)
    for (int64_t m : w.m_grid)
      for (ScaleKind sk : w.scales) {
        ++seen;
        const GemmProblem p = make_problem(m, l.n, l.k, sk, w.out);
        const ProblemKey key = key_of(p);
        if (st.done.count(key)) continue;
        const int sets = bench::rotation_sets(bench::gemm_call_bytes(p), mo);
        const bench::GemmOperandSets ops = bench::make_gemm_operands(p, sets, 0x7E57ull * seen);
        std::vector<std::pair<std::string, std::string>> choices;
        for (const std::string& b : backends)
          for (const std::string& c : gemm_configs(b))
            if (gemm_supports(b, c, p).empty()) choices.emplace_back(b, c);
        // Every config of the problem side by side, replays interleaved (measure.h): clock drift
        // during the run moves them alike instead of favouring whichever ran in a fast phase.
        const std::vector<bench::Measurement> ms = bench::measure_gemms(ops, choices, mo);
        double best = 0;
        std::string best_name;
        int timed = 0;
        for (size_t i = 0; i < choices.size(); ++i) {
          const auto& [b, c] = choices[i];
          const bench::Measurement& r = ms[i];
          if (!r.error.empty()) {
            std::printf("  %s/%s failed on %s: %s\n", b.c_str(), c.c_str(), to_string(p).c_str(), r.error.c_str());
            ++failures;
            continue;
          }
          out << nlohmann::json{{"scale", std::get<0>(key)}, {"out", std::get<1>(key)}, {"n", p.n}, {"k", p.k},
                                {"m", p.m}, {"backend", b}, {"config", c}, {"us", r.median_us},
                                {"min_us", r.min_us}, {"max_us", r.max_us}}.dump()
              << "\n";
          st.records.push_back({p.scale, p.out, p.n, p.k, p.m, b, c, r.median_us});
          ++timed;
          if (best_name.empty() || r.median_us < best) best = r.median_us, best_name = b + "/" + c;
        }
        out << nlohmann::json{{"done", true}, {"scale", std::get<0>(key)}, {"out", std::get<1>(key)}, {"n", p.n},
                              {"k", p.k}, {"m", p.m}}.dump()
            << "\n";
        out.flush();
        ++measured;
        const double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        const size_t left = total - seen;
        std::printf("[%zu/%zu %.0fs, eta %.0fs] %-30s %-44s %2d configs, best %8.2f us %s\n", seen, total, el,
                    el / measured * left, (l.model + "/" + l.layer + " tp" + std::to_string(l.tp)).c_str(),
                    to_string(p).c_str(), timed, best, best_name.c_str());
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
