// Automatic probing (route.h, "Automatic probing"; autoprobe.h): the shapes a router's table lacks,
// timed once per machine and kept in the probe cache.

#include "fp8route/tuning/env.h"
#include "route/autoprobe.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <map>
#include <mutex>
#include <utility>

#include "fp8route/device.h"
#include "fp8route/error.h"
#include "fp8route/tuning/route_log.h"

namespace fp8route {

namespace autoprobe {

namespace {

// What this process knows of one shape on one machine.
struct Known {
  bool settled = false;  // false: the cache file was looked at and had nothing; a probe is due
  std::vector<MeasurementRecord> records;
  std::string how;
  std::vector<int64_t> due;  // grid M a call-bounded probe left for later (ascending)
  double seconds = 0;        // spent probing it, here and in the processes before
};

struct State {
  std::mutex mu;  // guards the fields below; never held while probing or reading a file
  std::optional<AutoProbeConfig> config;
  std::map<std::pair<std::string, Key>, Known> known;  // (machine, shape)
  std::vector<AutoProbeRecord> records;
  double spent_s = 0;
  // Shapes of `known` with M still due: while there are none (almost always), due_near() answers
  // without asking the device for this machine's stamp.
  std::atomic<int> partial{0};
  // Held while a probe runs: two probes side by side on one GPU would time each other. Nothing that
  // holds it calls back into automatic probing (the probe runs backends by name, never routed).
  std::mutex probing;
};
State& state() {
  static State* s = new State;  // never destroyed: a plan or a call may outlive static destruction
  return *s;
}

std::string machine_id(const TableStamp& m) {
  return m.gpu + "\n" + std::to_string(m.sm_count) + "\n" + m.cuda + "\n" + m.cublaslt + "\n" + m.fp8route;
}

std::string seconds_text(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f s", s);
  return buf;
}

// A stream whose work is being captured into a graph (or whose state cannot be asked: the legacy
// stream while another stream captures) is not eager: nothing may be run or synchronized for it.
bool capturing(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  const cudaError_t e = cudaStreamIsCapturing(stream, &status);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();  // not sticky: leave no error for the caller's next call
    return true;
  }
  return status != cudaStreamCaptureStatusNone;
}

std::vector<int64_t> ms_of(const std::vector<MeasurementRecord>& records) {
  std::vector<int64_t> ms;
  for (const MeasurementRecord& r : records) ms.push_back(r.m);
  std::sort(ms.begin(), ms.end());
  ms.erase(std::unique(ms.begin(), ms.end()), ms.end());
  return ms;
}

// Settles the shape, or what more of it a later probe timed (under s.mu), and keeps the record.
void settle(State& s, const std::pair<std::string, Key>& id, std::vector<MeasurementRecord> records,
            std::vector<int64_t> due, std::string how, AutoProbeRecord rec) {
  Known& k = s.known[id];
  if (k.settled && rec.outcome == AutoProbeRecord::Outcome::cached) return;  // another thread settled it first
  if (rec.outcome == AutoProbeRecord::Outcome::probed || rec.outcome == AutoProbeRecord::Outcome::cached)
    k.seconds += rec.seconds;
  s.partial += int(!due.empty()) - int(!k.due.empty());
  k.settled = true, k.records = std::move(records), k.due = std::move(due), k.how = std::move(how);
  s.records.push_back(std::move(rec));
}

std::vector<int64_t> sorted_grid(const AutoProbeConfig& cfg) {
  std::vector<int64_t> g = cfg.probe.m_grid;
  std::sort(g.begin(), g.end());
  g.erase(std::unique(g.begin(), g.end()), g.end());
  return g;
}

// Whether a call within `bound` must probe more of a settled shape: an unbounded call while any M is
// due; a bounded one when a grid M next to its M (the nearest at or below, and at or above) is due.
bool needs_probe(const Known& k, const std::vector<int64_t>& grid, const CallBound& bound) {
  if (k.due.empty()) return false;
  if (bound.budget_s <= 0 || bound.m <= 0) return true;
  const auto is_due = [&](int64_t m) { return std::binary_search(k.due.begin(), k.due.end(), m); };
  const auto above = std::lower_bound(grid.begin(), grid.end(), bound.m);
  if (above != grid.end() && is_due(*above)) return true;
  if (above != grid.begin() && is_due(*std::prev(above))) return true;
  return above == grid.end() && is_due(grid.back());
}

std::string due_text(const std::vector<int64_t>& due) {
  return std::to_string(due.size()) + " M of the grid still due";
}

AutoProbeRecord record_of(const Key& key, std::string_view caller, AutoProbeRecord::Outcome outcome) {
  AutoProbeRecord r;
  r.scale = key.scale, r.out = key.out, r.n = key.n, r.k = key.k;
  r.caller = std::string(caller), r.outcome = outcome;
  return r;
}

}  // namespace

bool has_entry(const RoutingTable& table, const Key& key) {
  for (const TableEntry& e : table.entries)
    if (e.scale == key.scale && e.out == key.out && e.n == key.n && e.k == key.k && !e.breakpoints.empty()) return true;
  return false;
}

AutoProbeConfig config_from_environment() {
  AutoProbeConfig c;
  if (const auto v = env::get("FP8ROUTE_AUTOPROBE"); v && *v == "0") c.enabled = false;
  c.cache_dir = probe_cache::default_dir();
  for (auto [name, field] : {std::pair{"FP8ROUTE_AUTOPROBE_BUDGET", &c.budget_s},
                             std::pair{"FP8ROUTE_AUTOPROBE_CALL_BUDGET", &c.call_budget_s}}) {
    std::string bad;
    if (const std::optional<double> v = env::seconds(name, &bad)) *field = *v;
    else if (!bad.empty())
      route_log::note("fp8route autoprobe: " + std::string(name) + ": expected seconds >= 0, got '" + bad +
                      "'; the default " + seconds_text(*field) + " applies");
  }
  return c;
}

Timings timings(const Key& key, std::string_view caller, const TableStamp& machine, const Router& router,
                const ProblemAtM& problem_at, cudaStream_t stream, const CallBound& bound) {
  Timings out;
  const AutoProbeConfig cfg = autoprobe_config();
  if (!cfg.enabled) return out;
  State& s = state();
  const std::pair<std::string, Key> id{machine_id(machine), key};
  const std::string what = "fp8route autoprobe: " + std::string(caller) + " " + probe_cache::to_string(key);
  const std::vector<int64_t> grid = sorted_grid(cfg);
  // Under s.mu: the shape's timings when they serve this call (settled, and no M due that it needs).
  const auto known = [&]() -> std::optional<Timings> {
    const auto it = s.known.find(id);
    if (it == s.known.end() || !it->second.settled || needs_probe(it->second, grid, bound)) return std::nullopt;
    Timings t;
    t.records = it->second.records, t.how = it->second.how;
    return t;
  };
  // Under s.mu: what is known so far (settled with M due, or nothing).
  const auto so_far = [&]() -> Known {
    const auto it = s.known.find(id);
    return it == s.known.end() ? Known{} : it->second;
  };
  bool looked = false;  // at the cache file, by this process
  {
    std::lock_guard<std::mutex> lock(s.mu);
    if (std::optional<Timings> t = known()) return *t;
    looked = s.known.count(id) > 0;
  }
  const std::string path = cfg.cache_dir.empty() ? "" : probe_cache::path_of(cfg.cache_dir, machine, key);
  if (!looked) {
    std::string why;
    std::optional<probe_cache::File> f;
    if (!path.empty()) f = probe_cache::read(path, machine, key, why);
    std::lock_guard<std::mutex> lock(s.mu);
    if (std::optional<Timings> t = known()) return *t;
    if (f) {
      std::vector<MeasurementRecord> records;
      for (const Measured& m : f->measured)
        records.push_back({key.scale, key.out, key.n, key.k, m.m, m.backend, m.config, m.us});
      AutoProbeRecord rec = record_of(key, caller, AutoProbeRecord::Outcome::cached);
      rec.seconds = f->seconds, rec.m = ms_of(records), rec.timings = records.size(), rec.file = path;
      const std::string how = "timings read from the probe cache " + path + " (probed on " + f->machine.date + " in " +
                              seconds_text(f->seconds) + (f->due.empty() ? "" : ", " + due_text(f->due)) + ")";
      route_log::note(what + ": " + std::to_string(records.size()) + " " + how);
      settle(s, id, records, f->due, how, std::move(rec));
      if (std::optional<Timings> t = known()) return *t;
    } else {
      if (!why.empty()) route_log::note("fp8route autoprobe: ignored " + why);
      s.known.try_emplace(id);  // looked: the next call goes straight to the probe
    }
  }
  // Routes by what is known (a shape probed in part keeps its timings) and probes it no further.
  const auto give_up = [&](AutoProbeRecord::Outcome outcome, const std::string& why) {
    std::lock_guard<std::mutex> lock(s.mu);
    Known k = so_far();
    if (k.settled && k.due.empty()) {  // another thread settled it meanwhile
      out.records = std::move(k.records), out.how = std::move(k.how);
      return out;
    }
    route_log::note(what + ": " + std::string(name(outcome)) + ": " + why +
                    (k.records.empty() ? "; routed by the table" : "; routed by the timings so far"));
    AutoProbeRecord rec = record_of(key, caller, outcome);
    rec.note = why;
    settle(s, id, k.records, {}, k.how, std::move(rec));
    out.records = std::move(k.records), out.how = std::move(k.how);
    return out;
  };
  const auto over_budget = [&]() -> std::optional<std::string> {
    double spent = 0;
    {
      std::lock_guard<std::mutex> lock(s.mu);
      spent = s.spent_s;
    }
    if (spent < cfg.budget_s) return std::nullopt;
    return "this process has spent its probing budget (" + seconds_text(spent) + " of " + seconds_text(cfg.budget_s) +
           ", FP8ROUTE_AUTOPROBE_BUDGET)";
  };
  if (const auto why = over_budget()) return give_up(AutoProbeRecord::Outcome::skipped, *why);
  if (cuda_device_count() == 0)
    return give_up(AutoProbeRecord::Outcome::failed, "no GPU: " + cuda_unavailable_reason());
  if (capturing(stream)) {
    route_log::note(what + ": met under CUDA graph capture: routed by the table; probed at the next eager call");
    std::lock_guard<std::mutex> lock(s.mu);
    const Known k = so_far();
    out.records = k.records, out.how = k.how;
    out.deferred = true;
    return out;
  }

  std::lock_guard<std::mutex> probing(s.probing);
  Known before;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    if (std::optional<Timings> t = known()) return *t;  // another thread probed it meanwhile
    before = so_far();
  }
  if (const auto why = over_budget()) return give_up(AutoProbeRecord::Outcome::skipped, *why);  // spent meanwhile
  ProbeOptions opt = cfg.probe;
  if (before.settled) opt.m_grid = before.due, opt.always = true;  // the rest of a bounded probe
  else {
    bool choice = false;
    try {
      for (int64_t m : opt.m_grid) choice = choice || router.probe_candidates(problem_at(m, ""), opt.top).size() > 1;
    } catch (const std::exception& e) {
      return give_up(AutoProbeRecord::Outcome::failed, probe_cache::message_of(e));
    }
    if (!choice) return give_up(AutoProbeRecord::Outcome::skipped, "one candidate at every M: nothing to rank");
  }

  ShapeProbe probe;
  const auto t0 = std::chrono::steady_clock::now();
  try {
    probe = probe_within(router, problem_at, opt, bound.budget_s, bound.m);
  } catch (const Error& e) {
    if (e.category() != ErrorCategory::timeout) return give_up(AutoProbeRecord::Outcome::failed, probe_cache::message_of(e));
    // The stuck work may still hold the GPU: no later timing in this process could be trusted.
    {
      std::lock_guard<std::mutex> lock(s.mu);
      if (s.config) s.config->enabled = false;
    }
    route_log::always("fp8route: " + std::string(caller) + " " + probe_cache::to_string(key) + ": " +
                      probe_cache::message_of(e) + "; automatic probing is off for the rest of this process");
    return give_up(AutoProbeRecord::Outcome::failed, probe_cache::message_of(e));
  } catch (const std::exception& e) {
    return give_up(AutoProbeRecord::Outcome::failed, probe_cache::message_of(e));
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  {
    std::lock_guard<std::mutex> lock(s.mu);
    s.spent_s += seconds;
  }
  std::vector<MeasurementRecord> records = before.records;
  records.insert(records.end(), probe.records.begin(), probe.records.end());
  if (records.empty()) return give_up(AutoProbeRecord::Outcome::failed, "no candidate ran");

  AutoProbeRecord rec = record_of(key, caller, AutoProbeRecord::Outcome::probed);
  rec.seconds = seconds, rec.m = ms_of(probe.records), rec.timings = probe.records.size();
  std::string cached;
  if (path.empty()) {
    rec.note = "no cache folder (FP8ROUTE_CACHE_DIR, XDG_CACHE_HOME and HOME are unset): kept in this process";
    cached = rec.note;
  } else {
    probe_cache::File f{machine, key, std::string(caller), before.seconds + seconds, {}, probe.due};
    for (const MeasurementRecord& r : records) f.measured.push_back({r.m, r.backend, r.config, r.us});
    try {
      probe_cache::write(path, f);
      rec.file = path;
      cached = "cached in " + path;
    } catch (const std::exception& e) {
      rec.note = std::string(probe_cache::message_of(e)) + ": kept in this process";
      cached = rec.note;
    }
  }
  const std::string due = probe.due.empty() ? "" : ", " + due_text(probe.due);
  const std::string how = "probed on this GPU in " + seconds_text(before.seconds + seconds) + due + " (" + cached + ")";
  // A call that blocks to time kernels is said once, whatever FP8ROUTE_LOG says: engines see it at
  // start-up and can warm up ahead instead (warmup(), docs/routing.md).
  route_log::always("fp8route: " + std::string(caller) + " met " + probe_cache::to_string(key) +
                    ", which the routing table lacks: timed " + std::to_string(rec.m.size()) + " M (" +
                    std::to_string(probe.records.size()) + " timings) in " + seconds_text(seconds) + due +
                    "; cached for later processes (FP8ROUTE_AUTOPROBE=0 routes by the table alone)");
  route_log::note(what + ": probed " + std::to_string(rec.m.size()) + " M (" + std::to_string(probe.records.size()) +
                  " timings) in " + seconds_text(seconds) + due + "; " + cached);
  std::lock_guard<std::mutex> lock(s.mu);
  settle(s, id, records, probe.due, how, std::move(rec));
  out.records = std::move(records), out.how = how;
  return out;
}

bool due_near(const Key& key, int64_t m) {
  if (state().partial.load() == 0) return false;
  const AutoProbeConfig cfg = autoprobe_config();
  if (!cfg.enabled) return false;
  const std::optional<TableStamp> machine = machine_here();
  if (!machine) return false;
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  const auto it = s.known.find({machine_id(*machine), key});
  return it != s.known.end() && it->second.settled && needs_probe(it->second, sorted_grid(cfg), {m, 1});
}

namespace {

// The routed scaled_mm's problem at every M for a call `p`: its bias, its block weight-scale form, its
// per-token or per-tensor activation scale (a single row has one scale either way; its per-token form
// is assumed). Every accumulation class is timed: the timings are the shape's, kept for every later
// caller, and routing keeps to the class each call asks for.
ProblemAtM problem_at_of(const GemmProblem& p) {
  return [call = p](int64_t m, const std::string&) {
    GemmProblem q = call;
    q.m = m, q.align = 16, q.accum = Accum::fast;
    if (q.scale == ScaleKind::row) q.sa_vector = m != 1 && (call.sa_vector || call.m == 1);
    return q;
  };
}

// default_router() with `p`'s shape's timings merged in (probing within `bound` when due), the merged
// router made the default one unless another replaced it meanwhile.
std::shared_ptr<const Router> merged_router(const GemmProblem& p, cudaStream_t stream, std::string_view caller,
                                            const CallBound& bound, bool& deferred, Timings* timings_out) {
  deferred = false;
  std::shared_ptr<const Router> r = default_router();
  const Key key{p.scale, p.out, p.n, p.k};
  if (!autoprobe_config().enabled || (has_entry(r->table(), key) && !due_near(key, bound.budget_s > 0 ? bound.m : 0)))
    return r;
  const std::optional<TableStamp> machine = machine_here();
  if (!machine) return r;
  Timings t = timings(key, caller, *machine, *r, problem_at_of(p), stream, bound);
  deferred = t.deferred;
  if (t.records.empty()) return r;
  auto merged = std::make_shared<const Router>(r->with_measurements(t.records));
  replace_default_router(r, merged);
  if (timings_out) *timings_out = std::move(t);
  return merged;
}

}  // namespace

std::shared_ptr<const Router> router_for_call(const GemmProblem& p, cudaStream_t stream, bool& deferred) {
  return merged_router(p, stream, "scaled_mm", {p.m, autoprobe_config().call_budget_s}, deferred, nullptr);
}

void forget() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  s.known.clear();
  s.records.clear();
  s.spent_s = 0;
  s.partial = 0;
}

}  // namespace autoprobe

AutoProbeConfig autoprobe_config() {
  autoprobe::State& s = autoprobe::state();
  std::lock_guard<std::mutex> lock(s.mu);
  if (!s.config) s.config = autoprobe::config_from_environment();
  return *s.config;
}

void set_autoprobe_config(const AutoProbeConfig& config) {
  FP8ROUTE_CHECK(std::isfinite(config.budget_s) && config.budget_s >= 0,
                 "AutoProbeConfig::budget_s: seconds >= 0, got " << config.budget_s);
  FP8ROUTE_CHECK(std::isfinite(config.call_budget_s) && config.call_budget_s >= 0,
                 "AutoProbeConfig::call_budget_s: seconds >= 0, got " << config.call_budget_s);
  FP8ROUTE_CHECK(!config.probe.m_grid.empty(), "AutoProbeConfig::probe.m_grid: at least one M");
  const bool was = autoprobe_config().enabled;
  {
    autoprobe::State& s = autoprobe::state();
    std::lock_guard<std::mutex> lock(s.mu);
    s.config = config;
  }
  // scaled_mm keeps a route per problem until the default router changes: the same router again
  // drops them, so that shapes decided while probing was off are probed at their next call.
  if (config.enabled && !was) set_default_router(default_router());
}

void set_autoprobe(bool enabled) {
  AutoProbeConfig c = autoprobe_config();
  c.enabled = enabled;
  set_autoprobe_config(c);
}

std::string_view name(AutoProbeRecord::Outcome o) {
  switch (o) {
    case AutoProbeRecord::Outcome::probed: return "probed";
    case AutoProbeRecord::Outcome::cached: return "cached";
    case AutoProbeRecord::Outcome::skipped: return "skipped";
    case AutoProbeRecord::Outcome::failed: return "failed";
  }
  return "?";
}

std::vector<AutoProbeRecord> warmup(ScaleKind scale, DType out, int64_t n, int64_t k, bool bias) {
  FP8ROUTE_CHECK(n >= 1 && k >= 1, "warmup: n and k must be >= 1, got n=" << n << " k=" << k);
  const size_t before = autoprobe_records().size();
  const GemmProblem p = make_problem(2, n, k, scale, out, bias);  // per-token at M > 1
  bool deferred = false;
  (void)autoprobe::merged_router(p, nullptr, "warmup", {}, deferred, nullptr);
  std::vector<AutoProbeRecord> recs = autoprobe_records();
  return {recs.begin() + std::ptrdiff_t(std::min(before, recs.size())), recs.end()};
}

std::vector<AutoProbeRecord> autoprobe_records() {
  autoprobe::State& s = autoprobe::state();
  std::lock_guard<std::mutex> lock(s.mu);
  return s.records;
}

}  // namespace fp8route
