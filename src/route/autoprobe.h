#pragma once
// Automatic probing (route.h, "Automatic probing"): this process's timings per shape, read from the
// probe cache (probe_cache.h) or probed once, and the hooks of LinearPlan and the routed scaled_mm.

#include <cuda_runtime_api.h>

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "fp8route/gemm.h"
#include "fp8route/route.h"
#include "fp8route/tuning/probe_cache.h"

namespace fp8route::autoprobe {

using probe_cache::Key;

// Whether `table` has an exact entry for `key` (then nothing is probed for it).
bool has_entry(const RoutingTable& table, const Key& key);

using probe_cache::machine_here;

struct Timings {
  std::vector<MeasurementRecord> records;  // empty: route by the table
  std::string how;                         // where they came from, for LinearPlan::explain
  bool deferred = false;  // `stream` is capturing a graph: not probed now, and due at the next eager call
};

// What one bounded probe of a shape did: the timings, the M it timed and the M of the grid it left
// for later because the budget was spent.
struct ShapeProbe {
  std::vector<MeasurementRecord> records;
  std::vector<int64_t> done, due;  // ascending
};
// probe_shape, the grid's M taken nearest to `near_m` first (> 0; else ascending), no new M started
// once `budget_s` (> 0; else no bound) is spent and one M is done. probe.cpp.
ShapeProbe probe_within(const Router& router, const ProblemAtM& problem_at, const ProbeOptions& opt, double budget_s,
                        int64_t near_m);

// How much of the grid one call may probe: a first call at `m` probes for at most `budget_s` (0: the
// whole grid, as a LinearPlan at load time and warmup() do), nearest `m` first. A shape left with M
// due is probed further by a later call whose M lies next to a due one (the grid M at or below it,
// or at or above it).
struct CallBound {
  int64_t m = 0;
  double budget_s = 0;
};

// The timings of `key` on `machine` for `caller`, when automatic probing is on: this process's, else
// the probe cache file's, else a probe now (probe_within over `router`'s candidates, each in the form
// problem_at gives, within `bound`) that is written to the cache, unless `stream` is capturing a graph
// (deferred) or the budget is spent. One probe at a time in the process; each M of the grid is probed
// at most once per process (a failed or skipped shape is not tried again). A probe prints one line on
// stderr; more under FP8ROUTE_LOG; records in autoprobe_records(). A candidate that stalls (does not
// finish within the timing bound) is quarantined and automatic probing turned off for the process:
// the GPU may still be running it, so later timings could not be trusted.
Timings timings(const Key& key, std::string_view caller, const TableStamp& machine, const Router& router,
                const ProblemAtM& problem_at, cudaStream_t stream, const CallBound& bound = {});

// Whether this process's timings of `key` leave a grid M due next to `m` (then a call at `m` probes,
// even though its router's table has the shape's entry from the earlier, bounded probe).
bool due_near(const Key& key, int64_t m);

// The router the routed scaled_mm decides p with: default_router(), with the timings of p's shape
// merged in when its table has no exact entry for it (the merged router then replaces the default
// one, unless another replaced it meanwhile). `deferred` as in Timings: the caller must decide p again
// at its next call instead of keeping this decision.
std::shared_ptr<const Router> router_for_call(const GemmProblem& p, cudaStream_t stream, bool& deferred);

// The configuration the environment gives (FP8ROUTE_AUTOPROBE, FP8ROUTE_CACHE_DIR / XDG_CACHE_HOME /
// HOME, FP8ROUTE_AUTOPROBE_BUDGET), read now; autoprobe_config() reads it once.
AutoProbeConfig config_from_environment();

// Drops this process's timings, records and spent budget: the state a new process starts in (the
// configuration stays). For tests of "the next process".
void forget();

// set_default_router(next) if the default router is still `expected` (router.cpp); false otherwise.
bool replace_default_router(const std::shared_ptr<const Router>& expected, std::shared_ptr<const Router> next);

}  // namespace fp8route::autoprobe
