#pragma once
// The Router (docs/routing.md): looks a problem up in a routing table (exact entry, nearest
// shape, heuristic) and never picks a choice the backend says it cannot run; and the process-wide
// router that the routed scaled_mm and LinearPlan use.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "fp8route/gemm.h"
#include "fp8route/table.h"

namespace fp8route {

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

}  // namespace fp8route
