// Host-side state that threads share (docs/cpp.md, "Threads"), used from several threads at once:
// the process-wide router read while it is replaced, one Router and table files from many threads,
// the probe cache written and listed at once, automatic probing's per-process state (timings settled
// once, records, configuration) and the route log's once-per-line printing. Each test checks what a
// lost update or a torn read would change; built with FP8ROUTE_SANITIZE=thread (scripts/tsan.sh),
// ThreadSanitizer also reports any data race among them. No GPU needed.

#include <gtest/gtest.h>

#include <stdlib.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "fp8route/error.h"
#include "fp8route/gemm.h"
#include "fp8route/route.h"
#include "route/autoprobe.h"
#include "fp8route/tuning/probe_cache.h"
#include "fp8route/tuning/route_log.h"
#include "test_util.h"

namespace fp8route {
namespace {

namespace fs = std::filesystem;
using probe_cache::Key;

// Before main: route_log reads FP8ROUTE_LOG once per process, and RouteLog checks its lines.
const bool kLogOn = [] { return setenv("FP8ROUTE_LOG", "1", 1) == 0; }();

constexpr int kThreads = 6;

// Every choice runs (the H200's supports() answers are test_route's; here only the sharing matters).
const SupportsFn kAll = [](std::string_view, std::string_view, const GemmProblem&) { return std::string(); };

struct TempDir {
  fs::path path;
  TempDir() {
    std::string t = (fs::temp_directory_path() / "fp8route-threads-XXXXXX").string();
    path = mkdtemp(t.data());
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

// Runs fn(i) on n threads started together.
template <class F>
void on_threads(int n, F fn) {
  std::atomic<int> ready{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i)
    threads.emplace_back([&, i] {
      ++ready;
      while (ready < n) std::this_thread::yield();
      fn(i);
    });
  for (std::thread& t : threads) t.join();
}

TableStamp some_machine() { return {"NVIDIA H200", 132, "13.0", "13.1.0", "0.1.0", "2026-12-01"}; }

// One entry (row bf16 4096 x 4096) whose every M goes to backend/config.
RoutingTable one_entry(const std::string& backend, const std::string& config, double us) {
  RoutingTable t;
  t.stamp = some_machine();
  t.entries.push_back({ScaleKind::row, DType::bf16, 4096, 4096, {{4096, backend, config}}, {{16, backend, config, us}}});
  return t;
}

// The shipped table, loaded once for the tests that share it.
const RoutingTable& shipped() {
  static const RoutingTable t = load_routing_table(default_table_path());
  return t;
}

// Problems over the shipped table's shapes (exact entries) and beside them (nearest), every scale
// kind, decode to prefill M.
std::vector<GemmProblem> problems_of(const RoutingTable& t, size_t count) {
  std::mt19937_64 rng = test::make_rng(1);
  std::vector<GemmProblem> out;
  const int64_t ms[] = {1, 3, 16, 100, 512, 4096, 9000};
  for (size_t i = 0; i < count; ++i) {
    const TableEntry& e = t.entries[rng() % t.entries.size()];
    const int64_t n = rng() % 4 ? e.n : e.n + 16 * int64_t(1 + rng() % 64);
    out.push_back(make_problem(ms[rng() % std::size(ms)], n, e.k, e.scale, e.out));
  }
  return out;
}

// ---- the process-wide router ---------------------------------------------------------------------

// Readers of default_router() while writers replace it: every router a reader holds answers as the
// router it is (no torn or freed one), the generation a reader sees never goes back, and every
// replacement counts once.
TEST(Threads, DefaultRouterIsReadWhileReplaced) {
  const std::shared_ptr<const Router> saved = default_router();
  const auto a = std::make_shared<const Router>(one_entry("reference", "simt_64x64", 10), kAll);
  const auto b = std::make_shared<const Router>(one_entry("cublaslt", "heuristic1", 10), kAll);
  // c: loaded from a file by load_default_table (with this machine's supports(): told apart by
  // its table, not by what it selects).
  TempDir dir;
  const std::string c_path = (dir.path / "c.json").string();
  save_routing_table(one_entry("reference", "simt_64x64", 20), c_path);
  const GemmProblem p = make_problem(16, 4096, 4096, ScaleKind::row, DType::bf16);
  set_default_router(a);

  constexpr int kWriters = 2, kSets = 300;
  const uint64_t before = default_router_generation();
  std::atomic<int> writing{kWriters}, bad{0}, reads{0};
  on_threads(kThreads, [&](int i) {
    if (i < kWriters) {
      for (int j = 0; j < kSets; ++j) {
        if (j % 50 == 49) load_default_table(c_path);
        else set_default_router(j % 2 ? a : b);
      }
      --writing;
      return;
    }
    uint64_t last = 0;
    while (writing > 0) {
      const uint64_t g = default_router_generation();
      const std::shared_ptr<const Router> r = default_router();
      if (g < last) ++bad;
      last = g;
      const Route route = r->select(p);
      if (r == a || r == b) {
        if (route.config != (r == a ? "simt_64x64" : "heuristic1") || route.source != Route::Source::exact) ++bad;
      } else if (r->table().entries.size() != 1 || r->table().entries[0].measured.at(0).us != 20) {
        ++bad;
      }
      ++reads;
    }
  });
  EXPECT_EQ(bad, 0);
  EXPECT_EQ(default_router_generation() - before, uint64_t(kWriters * kSets));
  std::printf("%d reads while %d writers replaced the router %d times each\n", reads.load(), kWriters, kSets);
  set_default_router(saved);
}

// ---- one Router, table files ------------------------------------------------------------------------

// Routers are immutable: the shipped table's answers from many threads at once equal one thread's.
TEST(Threads, OneRouterAnswersManyThreadsAlike) {
  const Router router(shipped(), kAll);
  const std::vector<GemmProblem> ps = problems_of(shipped(), 64);
  std::vector<std::string> want;
  for (const GemmProblem& p : ps) {
    const Route r = router.select(p);
    want.push_back(r.backend + "/" + r.config + " " + std::string(name(r.source)) + "\n" + router.explain(p));
  }
  const RoutingTable want_slice = router.slice(ps[0].scale, ps[0].out, ps[0].n, ps[0].k);
  std::atomic<int> bad{0};
  on_threads(kThreads, [&](int i) {
    for (size_t j = 0; j < ps.size(); ++j) {
      const size_t q = (j * 7 + size_t(i) * 13) % ps.size();  // each thread its own order
      const Route r = router.select(ps[q]);
      if (r.backend + "/" + r.config + " " + std::string(name(r.source)) + "\n" + router.explain(ps[q]) != want[q]) ++bad;
    }
    if (!(router.slice(ps[0].scale, ps[0].out, ps[0].n, ps[0].k) == want_slice)) ++bad;
  });
  EXPECT_EQ(bad, 0);
}

// Saving and loading table files from many threads at once, each to its own file and all from one.
TEST(Threads, TablesLoadAndSaveAtOnce) {
  RoutingTable small;
  small.stamp = shipped().stamp;
  small.entries.assign(shipped().entries.begin(), shipped().entries.begin() + 12);
  TempDir dir;
  const std::string common = (dir.path / "common.json").string();
  save_routing_table(small, common);
  std::atomic<int> bad{0};
  on_threads(kThreads, [&](int i) {
    const std::string own = (dir.path / ("t" + std::to_string(i) + ".json")).string();
    for (int j = 0; j < 4; ++j) {
      save_routing_table(small, own);
      if (!(load_routing_table(own) == small)) ++bad;
      if (!(load_routing_table(common) == small)) ++bad;
    }
  });
  EXPECT_EQ(bad, 0);
}

// ---- the probe cache ----------------------------------------------------------------------------------

probe_cache::File file_of(const Key& key, int version) {
  probe_cache::File f;
  f.machine = some_machine();
  f.key = key;
  f.caller = "scaled_mm";
  f.seconds = 1 + version;
  for (int64_t m : {1, 16, 256})
    f.measured.push_back({m, "reference", "simt_64x64", double(100 * m + version)});
  return f;
}

// Writers of several files while listers list the folder: every file listed reads whole (the
// temporary files are never listed), and the folder ends with one file per key.
TEST(Threads, ProbeCacheListedWhileWritten) {
  TempDir dir;
  const std::string d = dir.path.string();
  constexpr int kKeys = 5, kWrites = 30, kWriters = 4;
  std::vector<Key> keys;
  for (int i = 0; i < kKeys; ++i) keys.push_back({ScaleKind::row, DType::bf16, 1024 + 16 * i, 4096});
  std::atomic<int> writing{kWriters}, bad{0}, listed{0};
  on_threads(kThreads, [&](int i) {
    if (i < kWriters) {
      for (int j = 0; j < kWrites; ++j) {
        const Key& k = keys[size_t(i + j) % keys.size()];
        probe_cache::write(probe_cache::path_of(d, some_machine(), k), file_of(k, i * 1000 + j));
      }
      --writing;
      return;
    }
    while (writing > 0)
      for (const probe_cache::Listed& l : probe_cache::list(d)) {
        ++listed;
        if (!l.file || !l.error.empty()) ++bad;
      }
  });
  EXPECT_EQ(bad, 0) << "a listed file did not read whole";
  EXPECT_EQ(probe_cache::list(d).size(), size_t(kKeys));
  EXPECT_EQ(probe_cache::clear(d), size_t(kKeys));
  EXPECT_TRUE(probe_cache::list(d).empty());
  std::printf("%d files listed while %d threads wrote\n", listed.load(), kWriters);
}

// ---- automatic probing's per-process state ------------------------------------------------------------

class AutoProbeThreads : public testing::Test {
 protected:
  void SetUp() override {
    saved_ = autoprobe_config();
    autoprobe::forget();
  }
  void TearDown() override {
    set_autoprobe_config(saved_);
    autoprobe::forget();
  }
  AutoProbeConfig saved_;
};

// Many threads meet shapes the router's table lacks at once: one in the probe cache, and a new one
// each round that is not (the budget spent, so nothing is probed with or without a GPU). Every
// thread gets the cached file's timings for the first and none for the others, and each shape is
// settled once (one record each), while other threads read the records and the configuration and
// set it again.
TEST_F(AutoProbeThreads, EachShapeIsSettledOnce) {
  TempDir dir;
  AutoProbeConfig c = saved_;
  c.enabled = true, c.cache_dir = dir.path.string(), c.budget_s = 0;
  set_autoprobe_config(c);
  const Key cached{ScaleKind::row, DType::bf16, 2048, 4096};
  const auto absent = [](int j) { return Key{ScaleKind::block, DType::bf16, 3072 + 16 * j, 4096}; };
  const probe_cache::File f = file_of(cached, 7);
  const std::string path = probe_cache::path_of(c.cache_dir, some_machine(), cached);
  probe_cache::write(path, f);
  const Router router(one_entry("reference", "simt_64x64", 10), kAll);
  const auto form = [](const Key& k) {
    return [k](int64_t m, const std::string&) { return make_problem(m, k.n, k.k, k.scale, k.out); };
  };
  constexpr int kCallers = 4, kRounds = 50;
  std::atomic<int> calling{kCallers}, bad{0};
  on_threads(kThreads, [&](int i) {
    if (i >= kCallers) {
      while (calling > 0) {
        for (const AutoProbeRecord& r : autoprobe_records())
          if (r.n != cached.n && (r.n < absent(0).n || r.n > absent(kRounds - 1).n)) ++bad;
        if (autoprobe_config().cache_dir != c.cache_dir) ++bad;
        set_autoprobe_config(c);
      }
      return;
    }
    for (int j = 0; j < kRounds; ++j) {
      const autoprobe::Timings t = autoprobe::timings(cached, i % 2 ? "LinearPlan" : "scaled_mm", some_machine(),
                                                      router, form(cached), nullptr);
      if (t.records.size() != f.measured.size() || t.how.find(path) == std::string::npos) ++bad;
      if (!autoprobe::timings(absent(j), "scaled_mm", some_machine(), router, form(absent(j)), nullptr).records.empty())
        ++bad;
    }
    --calling;
  });
  EXPECT_EQ(bad, 0);
  std::map<int64_t, std::vector<AutoProbeRecord::Outcome>> outcomes;
  for (const AutoProbeRecord& r : autoprobe_records()) outcomes[r.n].push_back(r.outcome);
  EXPECT_EQ(outcomes[cached.n], std::vector<AutoProbeRecord::Outcome>{AutoProbeRecord::Outcome::cached});
  for (int j = 0; j < kRounds; ++j)
    EXPECT_EQ(outcomes[absent(j).n], std::vector<AutoProbeRecord::Outcome>{AutoProbeRecord::Outcome::skipped}) << j;
}

// forget() ("the next process") while threads read a cached shape: every read is the whole file's.
TEST_F(AutoProbeThreads, ForgetWhileRead) {
  TempDir dir;
  AutoProbeConfig c = saved_;
  c.enabled = true, c.cache_dir = dir.path.string(), c.budget_s = 0;
  set_autoprobe_config(c);
  const Key key{ScaleKind::tensor, DType::f16, 1536, 2048};
  const probe_cache::File f = file_of(key, 3);
  probe_cache::write(probe_cache::path_of(c.cache_dir, some_machine(), key), f);
  const Router router(one_entry("reference", "simt_64x64", 10), kAll);
  const ProblemAtM form = [key](int64_t m, const std::string&) { return make_problem(m, key.n, key.k, key.scale, key.out); };
  std::atomic<int> reading{kThreads - 1}, bad{0};
  on_threads(kThreads, [&](int i) {
    if (i == 0) {
      while (reading > 0) autoprobe::forget();
      return;
    }
    for (int j = 0; j < 100; ++j) {
      const autoprobe::Timings t = autoprobe::timings(key, "scaled_mm", some_machine(), router, form, nullptr);
      if (t.records.size() != f.measured.size()) ++bad;
      for (size_t r = 0; r < t.records.size() && r < f.measured.size(); ++r)
        if (t.records[r].us != f.measured[r].us) ++bad;
    }
    --reading;
  });
  EXPECT_EQ(bad, 0);
}

// ---- the route log ------------------------------------------------------------------------------------

// FP8ROUTE_LOG lines printed from many threads at once: each distinct line exactly once, whole.
TEST(Threads, RouteLogPrintsEachLineOnce) {
  ASSERT_TRUE(kLogOn && route_log::enabled());
  RoutingTable t = one_entry("reference", "simt_64x64", 10);
  t.stamp = {};  // no GPU warning on any machine: only the lines below
  const Router router(std::move(t), kAll);
  constexpr int kLines = 40;
  static int run = 0;  // lines print once per process: new ones for each --gtest_repeat
  const int64_t m0 = 1 + kLines * run++;
  const auto note = [&](int q) { return "fp8route threads: note " + std::to_string(m0 + q); };
  const auto problem = [&](int q) { return make_problem(m0 + q, 4096, 4096, ScaleKind::row, DType::bf16); };
  testing::internal::CaptureStderr();
  on_threads(kThreads, [&](int i) {
    for (int j = 0; j < kLines; ++j) {
      const int q = (j * 7 + i * 3) % kLines;
      route_log::note(note(q));
      route_log::decided("scaled_mm", router, problem(q), router.select(problem(q)));
    }
  });
  const std::string err = testing::internal::GetCapturedStderr();
  std::map<std::string, int> seen;
  std::istringstream lines(err);
  for (std::string line; std::getline(lines, line);) ++seen[line];
  for (int q = 0; q < kLines; ++q) {
    EXPECT_EQ(seen[note(q)], 1) << q;
    EXPECT_EQ(seen[route_log::decision_line("scaled_mm", problem(q), router.select(problem(q)))], 1) << q;
  }
  EXPECT_EQ(seen.size(), size_t(2 * kLines)) << err;
}

}  // namespace
}  // namespace fp8route
