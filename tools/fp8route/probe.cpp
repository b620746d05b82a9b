// fp8route probe: a workload's routing candidates timed on this GPU (probe_shape, route.h), written
// as a routing table (the input table with the timings merged) for FP8ROUTE_TABLE, load_table() or
// bench --table. What changed against the input table is printed.

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <tuple>

#include "commands.h"
#include "fp8route/device.h"
#include "fp8route/error.h"
#include "workload.h"

namespace fp8route::cli {

std::vector<MeasurementRecord> probe_workload(const Workload& w, const Router& router, const ProbeOptions& po) {
  std::printf("probing %zu shapes x %zu scale kinds at %zu M (%s; the table's %zu best candidates, every cuBLASLt and "
              "skinny config, the heuristic's choice; %d replays, %d graph instances)\n",
              w.layers.size(), w.scales.size(), po.m_grid.size(), po.always ? "every M" : "M without an exact entry",
              po.top, po.reps, po.instances);
  std::vector<std::pair<int64_t, int64_t>> shapes;
  for (const tools::LayerShape& l : w.layers) shapes.emplace_back(l.n, l.k);
  const auto t0 = std::chrono::steady_clock::now();
  const auto since = [](auto t) { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count(); };
  const std::vector<MeasurementRecord> all = probe_shapes(router, shapes, w.scales, w.out, po, [&](const ProbedShape& s) {
    const tools::LayerShape& l = w.layers[s.shape];
    std::set<int64_t> ms;
    for (const MeasurementRecord& r : *s.records) ms.insert(r.m);
    std::printf("  probe %-30s %-6s n=%-6lld k=%-6lld %3zu timings at %2zu M in %5.1fs  [%zu/%zu eta %.0fs]\n",
                (l.model + "/" + l.layer + " tp" + std::to_string(l.tp)).c_str(), std::string(name(s.scale)).c_str(),
                (long long)l.n, (long long)l.k, s.records->size(), ms.size(), s.seconds, s.done, s.total,
                since(t0) / s.done * (s.total - s.done));
    std::fflush(stdout);
  });
  std::printf("probed: %zu timings in %.0fs\n", all.size(), since(t0));
  return all;
}

namespace {

// Per probed problem, the route before and after, each with the probe's time for it (the route
// before is among the candidates timed unless the backend could not run it).
void print_changes(const Workload& w, const Router& before, const Router& after,
                   const std::vector<MeasurementRecord>& recs) {
  using Key = std::tuple<ScaleKind, int64_t, int64_t, int64_t>;  // scale, n, k, m
  std::map<Key, std::map<std::pair<std::string, std::string>, double>> timed;
  for (const MeasurementRecord& r : recs) timed[{r.scale, r.n, r.k, r.m}][{r.backend, r.config}] = r.us;
  std::map<std::pair<int64_t, int64_t>, std::string> label;
  for (const tools::LayerShape& l : w.layers)
    label.try_emplace({l.n, l.k}, l.model + "/" + l.layer + " tp" + std::to_string(l.tp));
  size_t changed = 0;
  for (const auto& [key, times] : timed) {
    const auto& [scale, n, k, m] = key;
    const GemmProblem p = make_problem(m, n, k, scale, w.out);
    const Route a = before.select(p), b = after.select(p);
    if (a.backend == b.backend && a.config == b.config) continue;
    if (!changed++) std::printf("\nroutes changed by the probe (times as the probe measured them):\n");
    const auto us = [&](const Route& r) {
      const auto it = times.find({r.backend, r.config});
      if (it == times.end()) return std::string("not timed");
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.2f us", it->second);
      return std::string(buf);
    };
    std::printf("  %-30s %-40s %s %s/%s (%s) -> %s/%s (%s)\n", label[{n, k}].c_str(), to_string(p).c_str(),
                std::string(name(a.source)).c_str(), a.backend.c_str(), a.config.c_str(), us(a).c_str(),
                b.backend.c_str(), b.config.c_str(), us(b).c_str());
  }
  std::printf("\n%zu of %zu probed problems route differently from the input table\n", changed, timed.size());
}

}  // namespace

int run_probe(const ProbeCommandOptions& opt) {
  FP8ROUTE_CHECK(!opt.shapes.model.empty() || !opt.shapes.shapes.empty(),
                 "probe: name the layers to probe with --model (a catalog model, or all) or --shapes FILE");
  FP8ROUTE_CHECK(!opt.out_table.empty(), "-o/--out-table: name the routing table to write");
  const Workload w = select_workload(opt.shapes, "", /*dedupe=*/true);
  const std::string in_path = opt.table.empty() ? default_table_path() : opt.table;
  // A table that does not load is an error here, not the heuristic fallback of routing: the table
  // written is this one plus the probe's timings.
  const Router router(load_routing_table(in_path));
  FP8ROUTE_CHECK_CAT(cuda_device_count() > 0, ErrorCategory::unsupported,
                     "probe needs a GPU: " << cuda_unavailable_reason());
  {  // a bad output path fails now, not after the probe (a file made to find out is removed again)
    const bool existed = std::filesystem::exists(opt.out_table);
    const bool ok = std::ofstream(opt.out_table, std::ios::app).good();
    std::error_code ec;
    if (!existed) std::filesystem::remove(opt.out_table, ec);
    FP8ROUTE_CHECK_CAT(ok, ErrorCategory::io_error, opt.out_table << ": cannot write (-o/--out-table)");
  }
  ProbeOptions po;
  if (!opt.shapes.m.empty()) po.m_grid = w.m_grid;  // else ProbeOptions' grid: the catalog's M up to 4096
  po.top = static_cast<size_t>(opt.top), po.always = opt.always;
  po.reps = opt.shapes.reps, po.instances = opt.shapes.instances;
  const DeviceInfo& dev = device_info(0);
  std::printf("fp8route probe on %s (%d SMs): %s; input table %s (measured on %s, %s)\n", dev.name.c_str(),
              dev.sm_count, w.what.c_str(), in_path.c_str(), router.table().stamp.gpu.c_str(),
              router.table().stamp.date.c_str());
  const std::vector<MeasurementRecord> recs = probe_workload(w, router, po);
  const Router probed = router.with_measurements(recs);
  print_changes(w, router, probed, recs);
  save_routing_table(probed.table(), opt.out_table);
  std::printf("wrote %s: the input table with %zu timings merged (its stamp kept). Route by it with "
              "FP8ROUTE_TABLE=%s, fp8route bench --table, or fp8route.load_table() in Python\n",
              opt.out_table.c_str(), recs.size(), opt.out_table.c_str());
  return 0;
}

}  // namespace fp8route::cli
