#pragma once
// Routing tables (docs/routing.md): what was measured where (the stamp), the measurements and the
// breakpoints derived from them per (scale kind, out dtype, N, K); built from measurements, loaded,
// saved and found. The JSON format is in docs/routing.md; how tables are made from runs (tune's raw
// files, table build's manifests) is the tools' side (fp8route/tuning/).

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "fp8route/dtype.h"
#include "fp8route/gemm.h"
#include "fp8route/scale_kind.h"

namespace fp8route {

// Where and with what a table was measured. A table stamped otherwise still routes (the ranking
// rarely flips between library versions); explain() says when the stamp differs from this machine.
struct TableStamp {
  std::string gpu;  // device name, "NVIDIA H200"
  int sm_count = 0;
  std::string cuda, cublaslt, fp8route, date;  // "13.0", "13.1", "0.1.0", "2026-11-30"
  bool operator==(const TableStamp&) const = default;
};

// This machine's stamp (device 0) dated today (UTC), for a table tuned here.
TableStamp stamp_this_machine();

struct Measured {
  int64_t m = 0;
  std::string backend, config;
  double us = 0;
  bool operator==(const Measured&) const = default;
};

// The choice for every M up to max_m (and above the previous breakpoint's max_m); the last
// breakpoint also serves every larger M.
struct Breakpoint {
  int64_t max_m = 0;
  std::string backend, config;
  bool operator==(const Breakpoint&) const = default;
};

struct TableEntry {
  ScaleKind scale = ScaleKind::tensor;
  DType out = DType::bf16;
  int64_t n = 0, k = 0;
  std::vector<Breakpoint> breakpoints;  // max_m strictly increasing, at least one
  std::vector<Measured> measured;       // what the breakpoints were derived from
  bool operator==(const TableEntry&) const = default;
};

struct RoutingTable {
  TableStamp stamp;
  std::vector<TableEntry> entries;  // one per (scale, out, n, k)
  bool operator==(const RoutingTable&) const = default;
};

// One measurement: a (backend, config) timed on one problem (what a probe returns and a table's
// entries are built from).
struct MeasurementRecord {
  ScaleKind scale = ScaleKind::tensor;
  DType out = DType::bf16;
  int64_t n = 0, k = 0, m = 0;
  std::string backend, config;
  double us = 0;
};

// Per (scale, out, n, k): the fastest (backend, config) at each measured M, runs of equal choices
// merged into one breakpoint whose max_m is the run's largest M. Repeated records keep the minimum.
RoutingTable build_routing_table(const std::vector<MeasurementRecord>& records, TableStamp stamp);

// Throws Error(io_error) naming the file, the JSON path ("entries[3].measured[0][3] (us)") and what
// is wrong, and nothing else, whatever the file holds: not JSON, nested deeper than 32, a number
// beyond double's range, a key twice in one object, a missing or mistyped field, a version other
// than 1, an out dtype other than bf16/f16, N, K or M outside [1, 2^31), an unknown scale kind or
// backend, an empty config, breakpoints empty or not increasing, `measured` empty or a (m, backend,
// config) twice. Messages are UTF-8 (other bytes quoted as \xNN). An empty path (default_table_path()
// found nothing) fails listing the places looked in.
RoutingTable load_routing_table(const std::string& path);
void save_routing_table(const RoutingTable& table, const std::string& path);
// The table to use when none is named: $FP8ROUTE_TABLE; else the first routes/h200.json that exists
// in $FP8ROUTE_DATA_DIR, in $FP8ROUTE_SOURCE_DIR (each when set), beside the library or executable
// this runs in, in <that folder>/../share/fp8route (an install prefix), in <the install prefix
// configured at build time>/share/fp8route, in the source tree built from; else "".
std::string default_table_path();

}  // namespace fp8route
