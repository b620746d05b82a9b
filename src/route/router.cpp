// The Router: table lookup, nearest-shape fallback, the heuristic, and a supports() check on every
// choice (a table measured elsewhere, or a problem with odd alignment, may name a backend that
// cannot run here; correctness first, then speed).

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <map>
#include <mutex>
#include <sstream>
#include <tuple>

#include "fp8route/device.h"
#include "fp8route/error.h"
#include "fp8route/route.h"
#include "gemm/backend.h"
#include "route/heuristic.h"
#include "route/autoprobe.h"

namespace fp8route {

namespace {

// How many nearest entries a shape missing from the table is routed by (blend_nearest).
constexpr size_t kBlendEntries = 5;
// explain() calls a runner-up measured within this ratio of the choice a near-tie.
constexpr double kNearTie = 1.03;

// Why backend/config cannot run p ("" when it can): its accumulation class when p asks for
// accum=precise (whatever `supports` is: tests substitute another GPU's answers), then `supports`;
// a config this build does not have (a table from another version) answers with the lookup's error.
std::string why_not(const SupportsFn& supports, const std::string& backend, const std::string& config,
                    const GemmProblem& p) {
  if (std::string why = gemm::accum_reason(backend, config, p); !why.empty()) return why;
  try {
    return supports(backend, config, p);
  } catch (const Error& err) {
    return err.what();
  }
}

double log_distance(const TableEntry& e, const GemmProblem& p) {
  return std::abs(std::log(double(e.n)) - std::log(double(p.n))) +
         std::abs(std::log(double(e.k)) - std::log(double(p.k)));
}

const Breakpoint& breakpoint_for(const TableEntry& e, int64_t m) {
  for (const Breakpoint& b : e.breakpoints)
    if (m <= b.max_m) return b;
  return e.breakpoints.back();
}

// The measured M closest to m in ratio (time scales with M, not M's difference); on a tie the
// larger, as between breakpoints. 0 when nothing was measured.
int64_t nearest_measured_m(const TableEntry& e, double m) {
  int64_t best = 0;
  double dist = INFINITY;
  for (const Measured& r : e.measured) {
    const double d = std::abs(std::log(double(r.m)) - std::log(std::max(m, 1.0)));
    if (d < dist || (d == dist && r.m > best)) best = r.m, dist = d;
  }
  return best;
}

std::vector<const Measured*> ranked_at(const TableEntry& e, int64_t m) {
  std::vector<const Measured*> out;
  for (const Measured& r : e.measured)
    if (r.m == m) out.push_back(&r);
  std::stable_sort(out.begin(), out.end(), [](const Measured* a, const Measured* b) { return a->us < b->us; });
  return out;
}

// The measured M just below and just above m, when m lies strictly between two measured M
// ({0, 0} otherwise: m measured, or outside the measured range).
std::pair<int64_t, int64_t> measured_around(const TableEntry& e, int64_t m) {
  int64_t lo = 0, hi = 0;
  for (const Measured& r : e.measured) {
    if (r.m == m) return {0, 0};
    if (r.m < m) lo = std::max(lo, r.m);
    if (r.m > m && (hi == 0 || r.m < hi)) hi = r.m;
  }
  return lo > 0 && hi > 0 ? std::make_pair(lo, hi) : std::make_pair(int64_t{0}, int64_t{0});
}

// A backend that ranks its configs per problem (GemmBackend::ranks_configs_per_problem: cuBLASLt's
// "heuristicN" is the N-th algorithm its heuristic ranks for one problem) names another algorithm
// at another M or shape, so such a time does not carry over; the backend's own choices and fixed
// configs do (GemmBackend::carries_over; gemm::config_carries_over says what a table of another
// build names).
bool carries_over(const std::string& backend, const std::string& config) {
  return gemm::config_carries_over(backend, config);
}

bool is_slow_fallback(const std::string& backend) {
  for (const gemm::GemmBackend* b : gemm::all_backends())
    if (b->name() == backend) return b->slow_fallback();
  return false;
}

// The tiles of `tile` rows that M rows take.
int64_t tiles_of(int tile, int64_t m) { return (m + tile - 1) / tile; }

// Where m lies between lo and hi for a config's time, 0..1: in tiles along M for a config whose
// time steps with them (gemm::config_m_tile: M = 24 runs as many 16-row tiles as M = 32), else
// linearly in M.
double interpolation_weight(const std::string& backend, const std::string& config, int64_t m, int64_t lo,
                            int64_t hi) {
  const int tile = gemm::config_m_tile(backend, config);
  if (tile > 0 && tiles_of(tile, hi) > tiles_of(tile, lo))
    return double(tiles_of(tile, m) - tiles_of(tile, lo)) / double(tiles_of(tile, hi) - tiles_of(tile, lo));
  return double(m - lo) / double(hi - lo);
}

using Estimate = std::pair<double, std::pair<std::string, std::string>>;  // (us, (backend, config))

// Whether m runs as many of the config's tiles along M as `at` does (gemm::config_m_tile; false for
// a config whose time does not step with tiles).
bool same_tiles(const std::string& backend, const std::string& config, int64_t m, int64_t at) {
  const int tile = gemm::config_m_tile(backend, config);
  return tile > 0 && tiles_of(tile, m) == tiles_of(tile, at);
}

// Every config measured at both lo and hi that carries over, with its time interpolated at m; and
// one measured at only one of them that runs as many tiles at m as there (a decode or skinny config
// of M <= 8 measured at M = 4 but unable to run M = 16), with that time: fastest first.
std::vector<Estimate> interpolated_times(const TableEntry& e, int64_t m, int64_t lo, int64_t hi) {
  std::map<std::pair<std::string, std::string>, std::pair<double, double>> at;  // (t_lo, t_hi)
  for (const Measured& r : e.measured)
    if (r.m == lo || r.m == hi) {
      auto [it, fresh] = at.try_emplace({r.backend, r.config}, NAN, NAN);
      (r.m == lo ? it->second.first : it->second.second) = r.us;
    }
  std::vector<Estimate> scored;
  for (const auto& [c, t] : at) {
    if (!carries_over(c.first, c.second)) continue;
    if (!std::isnan(t.first) && !std::isnan(t.second)) {
      const double w = interpolation_weight(c.first, c.second, m, lo, hi);
      scored.push_back({(1 - w) * t.first + w * t.second, c});
    } else if (!std::isnan(t.first) && same_tiles(c.first, c.second, m, lo)) {
      scored.push_back({t.first, c});
    } else if (!std::isnan(t.second) && same_tiles(c.first, c.second, m, hi)) {
      scored.push_back({t.second, c});
    }
  }
  std::stable_sort(scored.begin(), scored.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  return scored;
}

// Candidates for an M between two measured M, best first: every config measured at both (that
// carries over to another M), ranked by its time interpolated linearly between them
// (interpolation_weight), with those measured at one of them that run as many tiles at M
// (interpolated_times); then the rest measured at hi. With each interior measured M held out in
// turn it ranks closer to the best than interpolating every config linearly in M or in
// (log M, log time) (test_route, HeldOutMInterpolates; figures in docs/routing.md, "The router").
std::vector<std::pair<std::string, std::string>> interpolated(const TableEntry& e, int64_t m, int64_t lo, int64_t hi) {
  std::vector<std::pair<std::string, std::string>> out;
  for (auto& [us, c] : interpolated_times(e, m, lo, hi)) out.push_back(c);
  for (const Measured* r : ranked_at(e, hi))
    if (std::find(out.begin(), out.end(), std::make_pair(r->backend, r->config)) == out.end())
      out.emplace_back(r->backend, r->config);
  return out;
}

std::string entry_name(const TableEntry& e) {
  return std::string(name(e.scale)) + " " + std::string(dtype_name(e.out)) + " n=" + std::to_string(e.n) +
         " k=" + std::to_string(e.k);
}

// A stamp's "13.1" names the release "13.1.0" the library reports.
bool version_matches(const std::string& stamp, const std::string& here) {
  return stamp == here || here.rfind(stamp + ".", 0) == 0;
}

std::string stamp_vs_machine(const TableStamp& s) {
  if (cuda_device_count() == 0) return "no GPU here to compare";
  const DeviceInfo& d = device_info(0);
  const LibraryVersions v = library_versions();
  std::string diff;
  const auto check = [&](const char* what, const std::string& table, const std::string& here, bool same) {
    if (!same) diff += std::string(diff.empty() ? "" : ", ") + what + " " + table + " here " + here;
  };
  check("GPU", s.gpu, d.name, s.gpu == d.name);
  check("SMs", std::to_string(s.sm_count), std::to_string(d.sm_count), s.sm_count == d.sm_count);
  const std::string cuda = cuda_version_string(v.cuda_runtime), lt = cublas_version_string(v.cublaslt);
  check("CUDA", s.cuda, cuda, version_matches(s.cuda, cuda));
  check("cuBLASLt", s.cublaslt, lt, version_matches(s.cublaslt, lt));
  check("fp8route", s.fp8route, v.fp8route, s.fp8route == v.fp8route);
  return diff.empty() ? "matches this machine"
                      : "differs from this machine (" + diff + "): still used, the measured ranking may have moved";
}

}  // namespace

std::string_view name(Route::Source s) {
  switch (s) {
    case Route::Source::exact: return "exact";
    case Route::Source::nearest: return "nearest";
    case Route::Source::heuristic: return "heuristic";
  }
  return "?";
}

Router::Router(RoutingTable table, SupportsFn supports) : table_(std::move(table)), supports_(std::move(supports)) {}

Router Router::from_file(const std::string& path, SupportsFn supports) {
  std::string error;
  try {
    return Router(load_routing_table(path), supports);
  } catch (const Error& e) {
    error = e.what();
  } catch (const std::exception& e) {  // load_routing_table throws only Error; out of memory, say
    error = "routing table " + path + ": " + e.what();
  }
  Router r(RoutingTable{}, std::move(supports));
  r.load_error_ = std::move(error);
  return r;
}

// The entries of p's scale kind, nearest first: p's out dtype before the other, then by how far M
// lies above the entry's largest measured M, then by (log N, log K). The first key keeps decode-only entries (measured to
// M = 64) from routing M = 4096 to a swap-AB decode config, several times slower than the entries
// measured there (docs/routing.md, "Nearest entries"). A linear scan: a table holds a few hundred
// entries.
std::vector<const TableEntry*> Router::nearest_entries(const GemmProblem& p, size_t count) const {
  std::vector<std::pair<std::tuple<bool, double, double>, const TableEntry*>> scored;
  for (const TableEntry& e : table_.entries) {
    if (e.scale != p.scale || e.breakpoints.empty()) continue;
    const double short_m = std::max(0.0, std::log(double(std::max<int64_t>(p.m, 1))) -
                                             std::log(double(e.breakpoints.back().max_m)));
    // Entries of the other out dtype only after every entry of this one: a table tuned for bf16
    // still routes f16 (the same kernels, the same bytes read).
    scored.push_back({{e.out != p.out, short_m, log_distance(e, p)}, &e});
  }
  std::stable_sort(scored.begin(), scored.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<const TableEntry*> out;
  for (size_t i = 0; i < scored.size() && i < count; ++i) out.push_back(scored[i].second);
  return out;
}

const TableEntry* Router::exact_entry(const GemmProblem& p) const {
  for (const TableEntry& e : table_.entries)
    if (e.scale == p.scale && e.out == p.out && e.n == p.n && e.k == p.k && !e.breakpoints.empty()) return &e;
  return nullptr;
}

// The exact entry, unless it was measured only below M and another entry of the scale kind and
// out dtype was measured at larger M than it: then the nearest entries, as for a shape the table
// lacks (nearest_entries puts those measured furthest towards M first). Taking a short entry's
// ranking at its largest M for prefill would choose swap-AB decode configs (test_route,
// ExactEntryMeasuredOnlyBelowM; figures in docs/routing.md).
const TableEntry* Router::find_entry(const GemmProblem& p, Route::Source& source) const {
  if (const TableEntry* e = exact_entry(p)) {
    const int64_t top = e->breakpoints.back().max_m;
    const auto measured_higher = [&](const TableEntry& o) {
      return o.scale == p.scale && o.out == p.out && !o.breakpoints.empty() && o.breakpoints.back().max_m > top;
    };
    if (p.m <= top || std::none_of(table_.entries.begin(), table_.entries.end(), measured_higher))
      return source = Route::Source::exact, e;
  }
  const std::vector<const TableEntry*> near = nearest_entries(p, 1);
  source = near.empty() ? Route::Source::heuristic : Route::Source::nearest;
  return near.empty() ? nullptr : near[0];
}

// Candidates for a shape the table does not have, best first: over the kBlendEntries nearest entries,
// each (backend, config) scored by the geometric mean of its time relative to that entry's best at
// the entry's measured M nearest to M x N / N' (a config an entry did not measure counts as 2x). A config that is
// good on all neighbours beats one that won narrowly on the closest.
std::vector<std::pair<std::string, std::string>> Router::blend_nearest(const GemmProblem& p) const {
  constexpr double kUnmeasured = 2.0;
  const std::vector<const TableEntry*> near = nearest_entries(p, kBlendEntries);
  std::map<std::pair<std::string, std::string>, std::vector<double>> rel;
  for (const TableEntry* e : near) {
    // The neighbour's M with the same output size M x N: the tile count, which decides between
    // small-tile, swap-AB and stream-K configs, carries over better than M alone (held out by
    // model: fewer points lose more than 20%; docs/routing.md). At M <= 8 the candidates are the
    // decode and skinny kernels, whose reach is in tokens whatever N: M itself.
    const double m_same_output = p.m <= 8 ? double(p.m) : double(p.m) * double(p.n) / double(e->n);
    const std::vector<const Measured*> ranked = ranked_at(*e, nearest_measured_m(*e, m_same_output));
    for (const Measured* r : ranked) {
      if (!carries_over(r->backend, r->config)) continue;
      rel[{r->backend, r->config}].push_back(r->us / ranked[0]->us);
    }
  }
  std::vector<std::pair<double, std::pair<std::string, std::string>>> scored;
  for (auto& [c, v] : rel) {
    double log_sum = 0;
    for (double x : v) log_sum += std::log(x);
    log_sum += double(near.size() - v.size()) * std::log(kUnmeasured);
    scored.push_back({log_sum, c});
  }
  std::stable_sort(scored.begin(), scored.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<std::pair<std::string, std::string>> out;
  for (auto& [score, c] : scored) out.push_back(std::move(c));
  return out;
}

Router Router::with_measurements(const std::vector<MeasurementRecord>& records) const {
  using Key = std::tuple<ScaleKind, DType, int64_t, int64_t>;
  std::map<Key, std::vector<MeasurementRecord>> fresh;  // per entry: the new records
  for (const MeasurementRecord& r : records) fresh[{r.scale, r.out, r.n, r.k}].push_back(r);
  RoutingTable t = table_;
  for (auto& [key, recs] : fresh) {
    const auto& [scale, out, n, k] = key;
    auto it = std::find_if(t.entries.begin(), t.entries.end(), [&](const TableEntry& e) {
      return e.scale == scale && e.out == out && e.n == n && e.k == k;
    });
    if (it != t.entries.end()) {
      // The old measurements at M the new records do not cover stay; at the others, the new ones rank.
      std::vector<int64_t> covered;
      for (const MeasurementRecord& r : recs) covered.push_back(r.m);
      for (const Measured& m : it->measured)
        if (std::find(covered.begin(), covered.end(), m.m) == covered.end())
          recs.push_back({scale, out, n, k, m.m, m.backend, m.config, m.us});
    }
    TableEntry e = build_routing_table(recs, t.stamp).entries.at(0);
    if (it != t.entries.end()) *it = std::move(e);
    else t.entries.push_back(std::move(e));
  }
  Router r(std::move(t), supports_);
  r.load_error_ = load_error_;
  return r;
}

RoutingTable Router::slice(ScaleKind scale, DType out, int64_t n, int64_t k) const {
  RoutingTable t;
  t.stamp = table_.stamp;
  GemmProblem p = make_problem(1, n, k, scale, out);
  std::vector<const TableEntry*> used;
  if (const TableEntry* e = exact_entry(p)) used.push_back(e);
  // The nearest-entry order, and whether the exact entry serves (find_entry), change with M only
  // where M crosses an entry's largest measured M, so M = 1 and every max_m and max_m + 1 visit
  // every case there is.
  std::vector<int64_t> ms = {1};
  for (const TableEntry& e : table_.entries)
    if (!e.breakpoints.empty()) ms.push_back(e.breakpoints.back().max_m), ms.push_back(e.breakpoints.back().max_m + 1);
  for (int64_t m : ms) {
    p.m = m;
    Route::Source source;
    find_entry(p, source);
    if (source != Route::Source::nearest) continue;
    for (const TableEntry* e : nearest_entries(p, kBlendEntries))
      if (std::find(used.begin(), used.end(), e) == used.end()) used.push_back(e);
  }
  // In table order, so that ties in the nearest-entry sort break the same way as in the full table.
  for (const TableEntry& e : table_.entries)
    if (std::find(used.begin(), used.end(), &e) != used.end()) t.entries.push_back(e);
  return t;
}

std::vector<std::pair<std::string, std::string>> Router::candidates(const GemmProblem& p) const {
  Route::Source source;
  const TableEntry* e = find_entry(p, source);
  std::vector<std::pair<std::string, std::string>> out;
  if (!e) return out;
  // Nearest: the neighbours' consensus (blend_nearest), since the single nearest shape's winner is
  // often a config that only just won there.
  if (source == Route::Source::nearest) return blend_nearest(p);
  // Exact, M between two measured M: interpolated (below).
  const auto [lo, hi] = measured_around(*e, p.m);
  if (lo > 0 && hi > 0) return interpolated(*e, p.m, lo, hi);
  // Exact, M outside the measured range: the configs measured at the nearest M that carry over,
  // fastest first, then the others.
  const int64_t near_m = nearest_measured_m(*e, p.m);
  if (near_m != p.m) {
    const std::vector<const Measured*> ranked = ranked_at(*e, near_m);
    for (bool carry : {true, false})
      for (const Measured* r : ranked)
        if (carries_over(r->backend, r->config) == carry) out.emplace_back(r->backend, r->config);
    return out;
  }
  // Exact, M measured: the breakpoint's choice, then the others measured there, fastest first.
  const Breakpoint& bp = breakpoint_for(*e, p.m);
  out.emplace_back(bp.backend, bp.config);
  for (const Measured* r : ranked_at(*e, p.m))
    if (r->backend != bp.backend || r->config != bp.config) out.emplace_back(r->backend, r->config);
  return out;
}

std::vector<std::pair<std::string, std::string>> Router::probe_candidates(const GemmProblem& p, size_t top) const {
  std::vector<std::pair<std::string, std::string>> out;
  const auto add = [&](const std::string& backend, const std::string& config) {
    if (std::find(out.begin(), out.end(), std::make_pair(backend, config)) != out.end()) return false;
    if (!why_not(supports_, backend, config, p).empty()) return false;
    out.emplace_back(backend, config);
    return true;
  };
  size_t taken = 0;
  for (const auto& [backend, config] : candidates(p)) {
    if (taken == top) break;
    taken += add(backend, config);
  }
  for (const gemm::GemmBackend* b : gemm::all_backends())
    for (int config : b->probe_configs(p)) add(std::string(b->name()), b->configs()[config]);
  const GemmChoice c = gemm_select(p);
  add(c.backend, c.config);
  return out;
}

Route Router::select(const GemmProblem& p) const {
  Route::Source source;
  const TableEntry* e = find_entry(p, source);
  std::string skipped;
  std::string short_exact;  // why the exact entry did not serve
  if (const TableEntry* x = exact_entry(p); x && source == Route::Source::nearest)
    short_exact = " (the exact entry " + entry_name(*x) + " is measured only up to m=" +
                  std::to_string(x->breakpoints.back().max_m) + ")";
  if (e) {
    const Breakpoint& bp = breakpoint_for(*e, p.m);
    const auto [lo, hi] = measured_around(*e, p.m);
    const int64_t near_m = nearest_measured_m(*e, p.m);
    const std::vector<std::pair<std::string, std::string>> candidates = this->candidates(p);
    for (size_t i = 0; i < candidates.size(); ++i) {
      const auto& [backend, config] = candidates[i];
      const std::string why = why_not(supports_, backend, config, p);
      if (why.empty()) {
        std::string how =
            source == Route::Source::nearest
                ? "nearest entries (closest " + entry_name(*e) + "), rank " + std::to_string(i + 1) +
                      " by geomean time relative to each entry's best at its nearest measured M" + short_exact
                : lo > 0
                ? std::string(name(source)) + " entry " + entry_name(*e) + ", rank " + std::to_string(i + 1) +
                      " by time interpolated between m=" + std::to_string(lo) + " and m=" + std::to_string(hi)
                : near_m != p.m
                ? std::string(name(source)) + " entry " + entry_name(*e) + ", m outside the measured range: rank " +
                      std::to_string(i + 1) + " at the nearest measured m=" + std::to_string(near_m) +
                      " (cuBLASLt ranks other than heuristic last: another M, another algorithm)"
                : std::string(name(source)) + " entry " + entry_name(*e) +
                      (i == 0 ? ", breakpoint m <= " + std::to_string(bp.max_m)
                              : ", measured rank " + std::to_string(i) + " at m=" + std::to_string(p.m));
        return {backend, config, source, how + (skipped.empty() ? "" : " (skipped " + skipped + ")")};
      }
      skipped += (skipped.empty() ? "" : "; ") + backend + "/" + config + ": " + why;
    }
  }
  const GemmChoice c = gemm_select(p);
  std::string why = e ? "no measured candidate of entry " + entry_name(*e) + " can run it (skipped " + skipped + "); "
                      : std::string("no table entry for ") + std::string(name(p.scale)) + " " +
                            std::string(dtype_name(p.out)) + "; ";
  return {c.backend, c.config, Route::Source::heuristic, why + "heuristic: " + c.why};
}

namespace {
struct DefaultRouter {
  std::mutex mu;
  std::shared_ptr<const Router> router;
  std::atomic<uint64_t> generation{1};
};
DefaultRouter& default_state() {
  static DefaultRouter state;
  return state;
}
}  // namespace

std::shared_ptr<const Router> default_router() {
  DefaultRouter& d = default_state();
  std::lock_guard<std::mutex> lock(d.mu);
  if (!d.router) d.router = std::make_shared<const Router>(Router::from_file(default_table_path()));
  return d.router;
}

void set_default_router(std::shared_ptr<const Router> router) {
  FP8ROUTE_CHECK(router != nullptr, "router: must not be null");
  DefaultRouter& d = default_state();
  std::lock_guard<std::mutex> lock(d.mu);
  d.router = std::move(router);
  d.generation.fetch_add(1);
}

void load_default_table(const std::string& path) {
  set_default_router(std::make_shared<const Router>(load_routing_table(path)));
}

uint64_t default_router_generation() { return default_state().generation.load(); }

bool autoprobe::replace_default_router(const std::shared_ptr<const Router>& expected,
                                       std::shared_ptr<const Router> next) {
  DefaultRouter& d = default_state();
  std::lock_guard<std::mutex> lock(d.mu);
  if (d.router != expected) return false;
  d.router = std::move(next);
  d.generation.fetch_add(1);
  return true;
}

namespace {
// One line of a ranked list in explain(): rank, time, ratio to the first, backend/config.
std::string ranked_line(size_t i, double us, double best, const std::string& backend, const std::string& config) {
  char line[64];
  std::snprintf(line, sizeof line, "%3zu. %10.2f us  %6.3fx  ", i + 1, us, us / best);
  return line + backend + "/" + config;
}
}  // namespace

std::string Router::explain(const GemmProblem& p) const {
  std::ostringstream os;
  os << "problem: " << to_string(p) << "\n";
  if (!load_error_.empty()) {
    os << "table: not loaded (" << load_error_ << "); routing by the heuristic\n";
  } else {
    const TableStamp& s = table_.stamp;
    os << "table: " << s.gpu << ", " << s.sm_count << " SMs, CUDA " << s.cuda << ", cuBLASLt " << s.cublaslt
       << ", fp8route " << s.fp8route << ", measured " << s.date << ", " << table_.entries.size()
       << " entries; " << stamp_vs_machine(s) << "\n";
  }
  const Route r = select(p);
  os << "source: " << name(r.source) << "\nchoice: " << r.backend << "/" << r.config << "\nwhy: " << r.why << "\n";
  os << "accum: " << name(p.accum)
     << (p.accum == Accum::precise ? " (precise-class configs only)" : " (every config; precise ones are at least as accurate)");
  try {
    os << "; the choice accumulates " << name(gemm_accum(r.backend, r.config, p)) << "\n";
  } catch (const Error&) {  // a name this build lacks
    os << "\n";
  }
  // The reference kernel is correct for everything and tens of times slower: say so, and what the
  // caller can change.
  if (is_slow_fallback(r.backend)) os << heuristic::slow_fallback_note(p) << "\n";
  // A shape (or an M) routed from other shapes: what a load-time probe would time on this GPU.
  if (r.source == Route::Source::nearest) {
    const auto probed = probe_candidates(p, ProbeOptions{}.top);
    os << "probe: not measured here; LinearPlan::probe (Python Fp8Linear.probe, fp8route bench --probe unseen) "
          "would time on this GPU:";
    for (size_t i = 0; i < probed.size(); ++i) os << (i ? ", " : " ") << probed[i].first << "/" << probed[i].second;
    os << "\n";
  }
  Route::Source source;
  if (const TableEntry* e = find_entry(p, source)) {
    if (const auto [lo, hi] = measured_around(*e, p.m); source == Route::Source::exact && lo > 0 && hi > 0) {
      const std::vector<Estimate> est = interpolated_times(*e, p.m, lo, hi);
      os << "estimated at m=" << p.m << " from m=" << lo << " and m=" << hi
         << " (interpolated in tiles along M where a config's tiles step, else in M; a config measured at one"
            " of them only, at that time where M runs as many of its tiles):\n";
      for (size_t i = 0; i < est.size(); ++i)
        os << ranked_line(i, est[i].first, est[0].first, est[i].second.first, est[i].second.second) << "\n";
    }
    const int64_t m = nearest_measured_m(*e, p.m);
    const std::vector<const Measured*> ranked = ranked_at(*e, m);
    os << "measured candidates for " << entry_name(*e) << " at m=" << m << " (nearest measured M):\n";
    std::vector<const Measured*> runnable;  // the ranked candidates not skipped, best first
    for (size_t i = 0; i < ranked.size(); ++i) {
      const std::string why = why_not(supports_, ranked[i]->backend, ranked[i]->config, p);
      std::string what;
      // What a rank-named config (cuBLASLt's heuristicN) runs here, on this GPU's library.
      if (why.empty()) try {
          what = gemm_describe(ranked[i]->backend, ranked[i]->config, p);
        } catch (const Error& err) {  // a name this build lacks (a table of another build) says nothing
          if (err.category() != ErrorCategory::invalid_argument) what = std::string("not described: ") + err.what();
        }
      os << ranked_line(i, ranked[i]->us, ranked[0]->us, ranked[i]->backend, ranked[i]->config)
         << (why.empty() ? "" : "  skipped: " + why) << (what.empty() ? "" : "  [" + what + "]") << "\n";
      if (why.empty()) runnable.push_back(ranked[i]);
    }
    // A choice measured at this very M that the runner-up nearly ties: say so, since such rankings
    // move between two GPUs of one model (docs/routing.md, "Near-ties").
    if (source == Route::Source::exact && m == p.m && runnable.size() > 1 &&
        runnable[0]->backend == r.backend && runnable[0]->config == r.config &&
        runnable[1]->us <= kNearTie * runnable[0]->us) {
      char pct[16];
      std::snprintf(pct, sizeof pct, "%.1f%%", 100 * (runnable[1]->us / runnable[0]->us - 1));
      os << "near-tie: " << runnable[1]->backend << "/" << runnable[1]->config << " measured within " << pct
         << " of the choice; rankings this close can differ between two GPUs of the same model, and "
            "`fp8route tune` (or a probe: fp8route bench --probe always, LinearPlan::probe with always) on "
            "this GPU settles them\n";
    }
  }
  return os.str();
}

}  // namespace fp8route
