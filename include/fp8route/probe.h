#pragma once
// Probing (docs/routing.md): a shape's routing candidates timed on this GPU, on request
// (probe_shape, probe_shapes) or automatically for the shapes the process-wide router's table lacks
// (AutoProbeConfig), and warming up ahead of serving (warmup).

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "fp8route/gemm.h"
#include "fp8route/router.h"
#include "fp8route/table.h"

namespace fp8route {

// A load-time probe: a shape routed from measurements made on this GPU instead of from another
// chip's table alone. At each M of m_grid, Router::probe_candidates (the table's `top` best guesses,
// the configs each backend asks to have timed, gemm_select()'s choice) are timed side by side with
// the one benchmark method (graph replay, cold L2, interleaved; docs/benchmarks.md). How close it
// routes to the best backend, and what it costs per shape: docs/routing.md, "Probing".
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
  // ProbeOptions' 21 M from decode to prefill (the router interpolates between them; why 21 and not
  // the 13 powers of two: docs/routing.md, "Between the probed M") with two graph instances instead
  // of four: the one-time cost per shape is what autoprobe_records() says.
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
