#pragma once
// A routing table built from the measurement files a manifest names, in the order they apply:
// `fp8route table build` (the manifest format is at the top of tools/fp8route/table.cpp), and
// test_route's check that routes/h200.json is what routes/h200.sources.json builds.

#include <cstddef>
#include <string>
#include <vector>

#include "fp8route/route.h"

namespace fp8route::tools {

struct TableSources {
  std::string path;                              // the manifest
  TableStamp stamp;                              // the table's: the machine and versions measured with
  int us_decimals = -1;                          // times rounded to this many decimals; -1: as measured
  std::vector<std::vector<std::string>> groups;  // files, relative paths resolved against the manifest's folder
};
// Throws Error(io_error) naming the manifest, the JSON path and the rule broken.
TableSources load_table_sources(const std::string& path);

// One measurement file's records of the backends a table routes to: fp8route tune's raw file
// (*.jsonl: its finished problems as read_tune_raw reads them, screened-out times and the final
// round settled) or a gemm_bench JSON array (*.json); either may be gzip-compressed (*.gz). Left
// out: gemm_bench's "floor" rows (a roofline, not a kernel), records with a bias (the routing key
// has none) and a slow_fallback() backend's (never a routing choice). Fields are checked as a
// routing table's are; Error(io_error) names the file, the line or element and the field.
std::vector<MeasurementRecord> read_measurement_file(const std::string& path);

struct GatheredRecords {
  std::vector<MeasurementRecord> records;  // by (scale, out, n, k, m, backend, config), names in byte order
  size_t files = 0;                        // files read
  size_t later = 0, later_problems = 0;    // records and problems that groups after the first added
};
// The groups' records, in order. Within a group a (problem, backend, config) timed in several files
// keeps its minimum (as the minimum over repeats). A group adds only problems (scale, out, n, k, m)
// that no earlier group measured: a problem's candidates must all come from one run, since the
// timings of two runs differ by a few percent. Times are then rounded to us_decimals.
GatheredRecords gather_records(const TableSources& sources);

// The records as a JSON list of [scale, out, n, k, m, backend, config, us], one a line, times as
// their shortest round-trip decimals (routes/h200-measurements.json).
std::string records_json(const std::vector<MeasurementRecord>& records);
// The records of such a file (what records_json wrote); Error(io_error) naming `path` when it
// cannot be read.
std::vector<MeasurementRecord> read_records_json(const std::string& path);

}  // namespace fp8route::tools
