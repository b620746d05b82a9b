// Automatic probing (route.h, "Automatic probing"; autoprobe.h): the shapes a router's table lacks,
// timed once per machine and kept in the probe cache.

#include "route/autoprobe.h"

#include <cuda_runtime_api.h>

#include <algorithm>
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
#include "route/route_log.h"

namespace fp8route {

namespace autoprobe {

namespace {

// What this process knows of one shape on one machine.
struct Known {
  bool settled = false;  // false: the cache file was looked at and had nothing; a probe is due
  std::vector<MeasurementRecord> records;
  std::string how;
};

struct State {
  std::mutex mu;  // guards the fields below; never held while probing or reading a file
  std::optional<AutoProbeConfig> config;
  std::map<std::pair<std::string, Key>, Known> known;  // (machine, shape)
  std::vector<AutoProbeRecord> records;
  double spent_s = 0;
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

// Settles the shape (under s.mu) and keeps the record.
void settle(State& s, const std::pair<std::string, Key>& id, std::vector<MeasurementRecord> records, std::string how,
            AutoProbeRecord rec) {
  Known& k = s.known[id];
  if (k.settled) return;  // another thread settled it first
  k.settled = true, k.records = std::move(records), k.how = std::move(how);
  s.records.push_back(std::move(rec));
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

std::optional<TableStamp> machine_here() {
  if (cuda_device_count() == 0) return std::nullopt;
  static const LibraryVersions v = library_versions();
  const DeviceInfo& d = device_info();
  TableStamp s{d.name, d.sm_count, cuda_version_string(v.cuda_runtime), cublas_version_string(v.cublaslt),
               v.fp8route, ""};
  const std::time_t now = std::time(nullptr);
  char date[16];
  std::strftime(date, sizeof date, "%Y-%m-%d", std::gmtime(&now));
  s.date = date;
  return s;
}

AutoProbeConfig config_from_environment() {
  AutoProbeConfig c;
  if (const char* v = std::getenv("FP8ROUTE_AUTOPROBE"); v && std::string(v) == "0") c.enabled = false;
  c.cache_dir = probe_cache::default_dir();
  if (const char* b = std::getenv("FP8ROUTE_AUTOPROBE_BUDGET"); b && *b) {
    char* end = nullptr;
    const double v = std::strtod(b, &end);
    if (end && *end == '\0' && std::isfinite(v) && v >= 0) c.budget_s = v;
    else
      route_log::note("fp8route autoprobe: FP8ROUTE_AUTOPROBE_BUDGET: expected seconds >= 0, got '" + std::string(b) +
                      "'; the default " + seconds_text(c.budget_s) + " applies");
  }
  return c;
}

Timings timings(const Key& key, std::string_view caller, const TableStamp& machine, const Router& router,
                const ProblemAtM& problem_at, cudaStream_t stream) {
  Timings out;
  const AutoProbeConfig cfg = autoprobe_config();
  if (!cfg.enabled) return out;
  State& s = state();
  const std::pair<std::string, Key> id{machine_id(machine), key};
  const std::string what = "fp8route autoprobe: " + std::string(caller) + " " + probe_cache::to_string(key);
  const auto known = [&]() -> std::optional<Timings> {  // under s.mu
    const auto it = s.known.find(id);
    if (it == s.known.end() || !it->second.settled) return std::nullopt;
    Timings t;
    t.records = it->second.records, t.how = it->second.how;
    return t;
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
                              seconds_text(f->seconds) + ")";
      route_log::note(what + ": " + std::to_string(records.size()) + " " + how);
      settle(s, id, records, how, std::move(rec));
      out.records = std::move(records), out.how = how;
      return out;
    }
    if (!why.empty()) route_log::note("fp8route autoprobe: ignored " + why);
    s.known.try_emplace(id);  // looked: the next call goes straight to the probe
  }
  const auto give_up = [&](AutoProbeRecord::Outcome outcome, const std::string& why) {
    route_log::note(what + ": " + std::string(name(outcome)) + ": " + why + "; routed by the table");
    std::lock_guard<std::mutex> lock(s.mu);
    AutoProbeRecord rec = record_of(key, caller, outcome);
    rec.note = why;
    settle(s, id, {}, "", std::move(rec));
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
    out.deferred = true;
    return out;
  }

  std::lock_guard<std::mutex> probing(s.probing);
  {
    std::lock_guard<std::mutex> lock(s.mu);
    if (std::optional<Timings> t = known()) return *t;  // another thread probed it meanwhile
  }
  if (const auto why = over_budget()) return give_up(AutoProbeRecord::Outcome::skipped, *why);  // spent meanwhile
  bool choice = false;
  try {
    for (int64_t m : cfg.probe.m_grid)
      choice = choice || router.probe_candidates(problem_at(m, ""), cfg.probe.top).size() > 1;
  } catch (const std::exception& e) {
    return give_up(AutoProbeRecord::Outcome::failed, probe_cache::message_of(e));
  }
  if (!choice) return give_up(AutoProbeRecord::Outcome::skipped, "one candidate at every M: nothing to rank");

  std::vector<MeasurementRecord> records;
  const auto t0 = std::chrono::steady_clock::now();
  try {
    records = probe_shape(router, problem_at, cfg.probe);
  } catch (const std::exception& e) {
    return give_up(AutoProbeRecord::Outcome::failed, probe_cache::message_of(e));
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  {
    std::lock_guard<std::mutex> lock(s.mu);
    s.spent_s += seconds;
  }
  if (records.empty()) return give_up(AutoProbeRecord::Outcome::failed, "no candidate ran");

  AutoProbeRecord rec = record_of(key, caller, AutoProbeRecord::Outcome::probed);
  rec.seconds = seconds, rec.m = ms_of(records), rec.timings = records.size();
  std::string cached;
  if (path.empty()) {
    rec.note = "no cache folder (FP8ROUTE_CACHE_DIR, XDG_CACHE_HOME and HOME are unset): kept in this process";
    cached = rec.note;
  } else {
    probe_cache::File f{machine, key, std::string(caller), seconds, {}};
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
  const std::string how = "probed on this GPU in " + seconds_text(seconds) + " (" + cached + ")";
  route_log::note(what + ": probed " + std::to_string(rec.m.size()) + " M (" + std::to_string(records.size()) +
                  " timings) in " + seconds_text(seconds) + "; " + cached);
  std::lock_guard<std::mutex> lock(s.mu);
  settle(s, id, records, how, std::move(rec));
  out.records = std::move(records), out.how = how;
  return out;
}

std::shared_ptr<const Router> router_for_call(const GemmProblem& p, cudaStream_t stream, bool& deferred) {
  deferred = false;
  std::shared_ptr<const Router> r = default_router();
  const Key key{p.scale, p.out, p.n, p.k};
  if (!autoprobe_config().enabled || has_entry(r->table(), key)) return r;
  const std::optional<TableStamp> machine = machine_here();
  if (!machine) return r;
  // The call's form at every M: its bias, its block weight-scale form, its per-token or per-tensor
  // activation scale (a single row has one scale either way; its per-token form is assumed). Every
  // accumulation class is timed: the timings are the shape's, kept for every later caller, and
  // routing keeps to the class each call asks for.
  const ProblemAtM problem_at = [call = p](int64_t m, const std::string&) {
    GemmProblem q = call;
    q.m = m, q.align = 16, q.accum = Accum::fast;
    if (q.scale == ScaleKind::row) q.sa_vector = m != 1 && (call.sa_vector || call.m == 1);
    return q;
  };
  const Timings t = timings(key, "scaled_mm", *machine, *r, problem_at, stream);
  deferred = t.deferred;
  if (t.records.empty()) return r;
  auto merged = std::make_shared<const Router>(r->with_measurements(t.records));
  replace_default_router(r, merged);
  return merged;
}

void forget() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  s.known.clear();
  s.records.clear();
  s.spent_s = 0;
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

std::vector<AutoProbeRecord> autoprobe_records() {
  autoprobe::State& s = autoprobe::state();
  std::lock_guard<std::mutex> lock(s.mu);
  return s.records;
}

}  // namespace fp8route
