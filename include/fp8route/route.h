#pragma once
// Measured routing (docs/routing.md): a table per GPU model maps (scale kind, out dtype, N, K)
// and M to the (backend, config) that measured fastest; the Router looks problems up in it and
// never picks a choice the backend says it cannot run. The JSON format is in docs/routing.md.
// Here: routing tables (built from measurements, loaded, saved, found), the Router, the load-time
// probe that times a shape's candidates on this GPU, and the process-wide router scaled_mm uses.
// How tables are made from runs (tune's raw files, table build's manifests) is the tools' side.

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

struct Route {
  std::string backend, config;
  enum class Source { exact, nearest, heuristic } source = Source::heuristic;
  std::string why;  // which entry or rule chose it, and every candidate skipped on the way
};
std::string_view name(Route::Source s);

// gemm_supports() by default; tests substitute the H200's answers on a machine without a GPU.
using SupportsFn = std::function<std::string(std::string_view backend, std::string_view config,
                                             const GemmProblem& p)>;

class Router {
 public:
  explicit Router(RoutingTable table, SupportsFn supports = gemm_supports);
  // A router from a table file; when the file cannot be loaded it routes by gemm_select() alone
  // and keeps the error (load_error(), shown by explain()) instead of throwing.
  static Router from_file(const std::string& path, SupportsFn supports = gemm_supports);

  // Exact (scale, out, N, K) entry -> its breakpoint for M; else the entry of the same scale and
  // out with the nearest (log N, log K); else gemm_select(). A choice the backend cannot run is
  // skipped for the entry's next-ranked measured candidate, then for gemm_select().
  Route select(const GemmProblem& p) const;
  // The table's (backend, config) candidates for p, best first, before any supports() check: what
  // select() walks (empty when the table has no entry of p's scale kind).
  std::vector<std::pair<std::string, std::string>> candidates(const GemmProblem& p) const;
  // What a load-time probe of p times on this GPU (LinearPlan::probe): the first `top` candidates()
  // that supports() allows, then each backend's probe configs for p that it allows (every cuBLASLt
  // rank: cuBLASLt ranks its algorithms for p itself, so its "heuristicN" wins do not carry over
  // from other shapes; every skinny config; decode's smallest covering token tile), then
  // gemm_select()'s choice; no duplicates, in that order.
  std::vector<std::pair<std::string, std::string>> probe_candidates(const GemmProblem& p, size_t top) const;
  // The problem, the table's stamp against this machine, the source, the choice, the ranked
  // measured candidates at the nearest measured M and why any candidate was skipped.
  std::string explain(const GemmProblem& p) const;

  // This router with `records` (measured here: a probe_shape()) added to its table: per (scale,
  // out, N, K), the entry is rebuilt from its measurements at the M the records do not cover and the
  // records (build_routing_table). Same supports(), same stamp (explain() names entries, not chips).
  Router with_measurements(const std::vector<MeasurementRecord>& records) const;

  // The entries select() can consult for (scale, out, N, K) at any M: the exact entry, and every
  // entry that is among the nearest for some M where the exact entry does not serve (there is
  // none, or it was measured only below that M). A Router over them routes those shapes the same.
  RoutingTable slice(ScaleKind scale, DType out, int64_t n, int64_t k) const;

  const RoutingTable& table() const { return table_; }
  const std::string& load_error() const { return load_error_; }

 private:
  const TableEntry* exact_entry(const GemmProblem& p) const;
  const TableEntry* find_entry(const GemmProblem& p, Route::Source& source) const;
  std::vector<const TableEntry*> nearest_entries(const GemmProblem& p, size_t count) const;
  std::vector<std::pair<std::string, std::string>> blend_nearest(const GemmProblem& p) const;

  RoutingTable table_;
  SupportsFn supports_;
  std::string load_error_;
};

// A load-time probe: a shape routed from measurements made on this GPU instead of from another
// chip's table alone. At each M of m_grid, Router::probe_candidates (the table's `top` best guesses,
// the configs each backend asks to have timed, gemm_select()'s choice) are timed side by side with the one
// benchmark method (graph replay, cold L2, interleaved; src/timing/measure.h).
// - CPU, on the recorded H200 measurements, each model held out of the table in turn: routing by the
//   fastest probe candidate loses 0.01-0.03% geometric mean, at most 10% on any point (top = 5; by
//   the table alone 1.6-3.1% and 105 of 6111 points over 20%; test_route, HeldOutModelProbed).
// - GPU (H200, fp8route bench --probe unseen, TP 8, 21 M, these defaults' 4 graph instances):
//   deepseek-v3, llama-3.1-405b and llama-3.1-8b held out: 3 of 882 problems more than 3% slower than
//   the best single backend, against 182 by the table alone (bench/results/2026-11-30-probe-h200).
// Cost there: 2.6-16 s per shape and scale kind for 21 M.
struct ProbeOptions {
  std::vector<int64_t> m_grid = {1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768,
                                 1024, 1536, 2048, 3072, 4096};  // the catalog's, to 4096
  size_t top = 5;       // the table's candidates timed at each M
  bool always = false;  // false: only the M where the table has no exact entry serving (select()'s
                        // source is not exact); true: every M (settles this GPU's near-ties)
  // timing::MeasureOptions. Several graph instances: a stream-K config's graph runs at one of a few
  // speeds for its life (measure.h), and one instance can crown a lucky one.
  int warmup = 5, reps = 20, instances = 4;
};

// The problem (scale forms included) `backend` runs at M; "" for the problem routing sees.
using ProblemAtM = std::function<GemmProblem(int64_t m, const std::string& backend)>;

// Probes one shape on device 0: the records of every candidate timed (a candidate that fails to run
// is left out). Needs a GPU (throws Error(unsupported) without one). Nothing is timed when no M of
// m_grid needs it (then the result is empty).
std::vector<MeasurementRecord> probe_shape(const Router& router, const ProblemAtM& problem_at,
                                           const ProbeOptions& opt = {});

// One (N, K) at one scale kind done by probe_shapes: its place in the run, what it timed and how long
// that took.
struct ProbedShape {
  size_t shape = 0;  // index into probe_shapes' `shapes`
  ScaleKind scale = ScaleKind::tensor;
  size_t done = 0, total = 0;  // (N, K, scale kind) probed so far, including this one, and in all
  double seconds = 0;
  const std::vector<MeasurementRecord>* records = nullptr;  // this one's timings
};
using ProbeProgress = std::function<void(const ProbedShape&)>;

// probe_shape of every (N, K) of `shapes` at every scale kind of `scales` (out dtype `out`), one
// after the other, `progress` called after each: the timings of all, for Router::with_measurements.
// `fp8route probe`, `fp8route bench --probe` and Python's fp8route.probe() run this.
std::vector<MeasurementRecord> probe_shapes(const Router& router, const std::vector<std::pair<int64_t, int64_t>>& shapes,
                                            const std::vector<ScaleKind>& scales, DType out,
                                            const ProbeOptions& opt = {}, const ProbeProgress& progress = {});

// The process-wide router that scaled_mm(args, stream) uses. Made on first use from
// default_table_path() with Router::from_file (a table that does not load leaves it routing by
// gemm_select(), the error kept in load_error()). Thread-safe; the returned router stays valid
// while held, even if it is replaced.
std::shared_ptr<const Router> default_router();
// Replaces it (a table tuned on this machine, say): scaled_mm's cached routes are dropped.
void set_default_router(std::shared_ptr<const Router> router);
// set_default_router from a table file; throws Error(io_error) naming the file when it does not load
// (the current router is then kept).
void load_default_table(const std::string& path);
// Bumped by every set_default_router(): callers that cache routes compare it.
uint64_t default_router_generation();

// ---- Automatic probing (docs/routing.md, "Automatic probing") ----------------------------------
// A LinearPlan made without a router (it routes by default_router()) and the routed scaled_mm,
// when they meet a (scale kind, out dtype, N, K) that their router's table has no exact entry for,
// time its candidates once on the current GPU (probe_shape with AutoProbeConfig::probe), keep the
// timings in the on-disk probe cache and route by them from then on, in this process and the next.
// A LinearPlan probes when it is made (load time); scaled_mm at its first eager call of the shape.
// Never under CUDA graph capture of the call's stream: that call routes by the table and the next
// eager call probes. The cache holds one file per shape, keyed by the GPU (name, SM count) and the
// CUDA, cuBLASLt and fp8route versions; another machine's files are ignored. Processes may share
// it: a file is written whole to a temporary name and renamed, and a file that does not read back
// is ignored (one line under FP8ROUTE_LOG).
struct AutoProbeConfig {
  bool enabled = true;    // FP8ROUTE_AUTOPROBE=0 turns it off
  std::string cache_dir;  // FP8ROUTE_CACHE_DIR, else $XDG_CACHE_HOME/fp8route, else $HOME/.cache/fp8route;
                          // "": timings kept in this process only
  double budget_s = 120;  // FP8ROUTE_AUTOPROBE_BUDGET: seconds of probing per process; a shape met once
                          // they are spent routes by the table (a probe started before finishes)
  // FP8ROUTE_AUTOPROBE_CALL_BUDGET: seconds a scaled_mm call may spend probing (0: no bound). It times
  // the grid's M nearest its own first and leaves the rest due: a later call whose M lies next to a due
  // M probes again within the same bound; a LinearPlan (at load time) or warmup() probes all of it.
  double call_budget_s = 2;
  // ProbeOptions' 21 M from decode to prefill (the router interpolates between them) with two graph
  // instances instead of four: the one-time cost per shape is what autoprobe_records() says. On
  // layer shapes outside the table (H200), against the powers of two alone (13 M): M between the
  // probed ones routed more than 5% behind the best backend at 11 of 160 points instead of 22
  // (worst 1.25x instead of 1.53x) for 1.6x the probing time.
  ProbeOptions probe = {ProbeOptions{}.m_grid, 5, false, 5, 20, 2};
};
// The configuration from the environment (read once), or the last one set.
AutoProbeConfig autoprobe_config();
// Replaces it for this process. Turning probing on drops scaled_mm's cached routes, so shapes met
// while it was off are probed at their next call.
void set_autoprobe_config(const AutoProbeConfig& config);
// set_autoprobe_config() with only `enabled` changed.
void set_autoprobe(bool enabled);

// What automatic probing did for one shape in this process (autoprobe_records()).
struct AutoProbeRecord {
  ScaleKind scale = ScaleKind::tensor;
  DType out = DType::bf16;
  int64_t n = 0, k = 0;
  std::string caller;  // what met the shape: "LinearPlan", "scaled_mm" or "warmup"
  // probed: timed here; cached: read from the probe cache; skipped: not probed (the budget was
  // spent, or one candidate at every M: nothing to rank); failed: the probe threw (note says why).
  enum class Outcome { probed, cached, skipped, failed } outcome = Outcome::probed;
  double seconds = 0;      // spent probing here (cached: what the probe that wrote the file took)
  std::vector<int64_t> m;  // the M with timings
  size_t timings = 0;      // (M, backend, config) timed
  std::string file;        // the cache file written or read ("" when none)
  std::string note;        // skipped, failed: why; probed: why the file was not written, if it was not
};
std::string_view name(AutoProbeRecord::Outcome o);
// What automatic probing did in this process, in order: one record per shape settled, and one per
// further part of a shape that call-bounded probes time in parts (the seconds of `probed` ones sum
// to the one-time cost).
std::vector<AutoProbeRecord> autoprobe_records();
// Warms up ahead of serving: probes (scale, out, N, K) now at every M of the probe grid the routed
// scaled_mm would still time at a first call (none when the table or the probe cache has the shape),
// and makes the process-wide router route it by the timings. What it did: autoprobe_records()' new
// entries (empty when nothing was due). A LinearPlan does the same for its layer when it is made.
std::vector<AutoProbeRecord> warmup(ScaleKind scale, DType out, int64_t n, int64_t k, bool bias = false);

}  // namespace fp8route
