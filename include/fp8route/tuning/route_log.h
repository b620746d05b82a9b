#pragma once
// Routing diagnostics on stderr, from where a router decides for a call (the routed scaled_mm and
// LinearPlan, each once per problem it has not decided before):
// - a warning, once per process for each (table GPU, device) pair, when the routing table in use
//   was measured on another GPU model than the one the call runs on: its measured ranking is
//   that GPU's, and near-ties (or more) may rank differently here;
// - with FP8ROUTE_LOG=1, one line per distinct decision (entry point, problem, choice, source): a
//   problem decided again with the same result (a new plan of the same shape, a new default
//   router) is not logged again.

#include <string>
#include <string_view>

#include "fp8route/gemm.h"
#include "fp8route/route.h"

namespace fp8route::route_log {

// The warning (one line, no newline) for a table stamped with `table_gpu` used on a device named
// `device_gpu`; "" when they name the same model (blanks at the ends and case ignored) or either
// is empty (a table without a stamp, no GPU).
std::string gpu_mismatch_warning(const std::string& table_gpu, const std::string& device_gpu);

// The FP8ROUTE_LOG line of one decision (no newline):
// "fp8route route: scaled_mm m=16 n=4096 k=4096 scale=row out=bf16 -> cublaslt/heuristic (exact)",
// with " bias", " align=N" (below 16 bytes) and " accum=precise" after the out dtype when they apply.
std::string decision_line(std::string_view caller, const GemmProblem& p, const Route& r);

// Whether FP8ROUTE_LOG is set to anything but "" or "0" (read once per process).
bool enabled();

// `router` chose `r` for `p` on behalf of `caller` ("scaled_mm", "LinearPlan"), for the current
// device: prints the GPU warning and the FP8ROUTE_LOG line when due (above). Thread-safe.
void decided(std::string_view caller, const Router& router, const GemmProblem& p, const Route& r);

// With FP8ROUTE_LOG: `line` (no newline) on stderr, once per process for each distinct text
// (automatic probing: what was probed or read from the cache, how long it took, a cache file
// ignored). Thread-safe.
void note(const std::string& line);
// `line` on stderr whether or not FP8ROUTE_LOG is set, once per process for each distinct text: what
// a user must hear of (a call that blocks to probe, a candidate quarantined). Thread-safe.
void always(const std::string& line);

}  // namespace fp8route::route_log
