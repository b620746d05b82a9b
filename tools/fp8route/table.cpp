// fp8route table build: a routing table from the measurement files a manifest names, in the order
// they apply; how the shipped routes/h200.json is made from the H200 runs its manifest names
// (test_route checks that routes/h200.sources.json builds it byte for byte). No GPU needed.
//
//   fp8route table build routes/h200.sources.json -o routes/h200.json \
//       [--records routes/h200-measurements.json]
//
// -o: the table (build_routing_table of the records, stamped with the manifest's stamp).
// --records: also the records themselves, a JSON list of [scale, out, n, k, m, backend, config, us]
// one a line (what test_route routes on without a GPU).
//
// Manifest (JSON):
//   {"format": "fp8route-table-sources", "version": 1,
//    "stamp": {"gpu", "sm_count", "cuda", "cublaslt", "fp8route", "date"},   as a table's stamp
//    "us_decimals": 4,                     optional: times rounded to this many decimals (0-12)
//    "groups": [{"about": "...", "files": ["h200-sources/<run>/x.raw.jsonl.gz", ...]}, ...]}
// Files: fp8route tune's raw files (*.jsonl, the finished problems, as tune --build-only reads them)
// or gemm_bench --json arrays (*.json), either gzip-compressed or not (*.gz); relative paths are
// relative to the manifest's folder; "about" is a note for readers. Groups apply in order: the first
// group's problems (scale, out, n, k, m) come from it, and each later group adds only the problems
// no earlier group measured (a problem's candidates all from one run: the timings of two runs differ
// by a few percent). Within a group, a (problem, backend, config) timed in several files keeps its
// minimum. Left out: gemm_bench's "floor" rows, records with a bias, and the reference backend's
// (GemmBackend::slow_fallback: never a routing choice). tools/common/table_sources.h has the rules.

#include <cstdio>
#include <fstream>
#include <string>

#include "commands.h"
#include "common/table_sources.h"
#include "fp8route/error.h"
#include "fp8route/route.h"

namespace fp8route::cli {

int run_table(const TableOptions& opt) {
  const tools::TableSources sources = tools::load_table_sources(opt.manifest);
  const tools::GatheredRecords gathered = tools::gather_records(sources);
  FP8ROUTE_CHECK_CAT(!gathered.records.empty(), ErrorCategory::io_error,
                     opt.manifest << ": its files hold no measurements to build a table from");
  const RoutingTable table = build_routing_table(gathered.records, sources.stamp);
  save_routing_table(table, opt.table);
  std::printf("wrote %s: %zu entries from %zu measurements in %zu files of %zu groups (%zu measurements of %zu "
              "problems from the groups after the first)\n",
              opt.table.c_str(), table.entries.size(), gathered.records.size(), gathered.files,
              sources.groups.size(), gathered.later, gathered.later_problems);
  if (!opt.records.empty()) {
    std::ofstream f(opt.records, std::ios::binary);
    f << tools::records_json(gathered.records);
    f.close();
    FP8ROUTE_CHECK_CAT(f.good(), ErrorCategory::io_error, opt.records << ": cannot write (--records)");
    std::printf("wrote %s: %zu records\n", opt.records.c_str(), gathered.records.size());
  }
  return 0;
}

}  // namespace fp8route::cli
