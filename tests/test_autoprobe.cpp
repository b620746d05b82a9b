// Automatic probing (route.h, "Automatic probing"; src/route/autoprobe.h, probe_cache.h).
// CPU: the probe cache file (round trip, damaged files and other machines' files ignored with one
// log line, concurrent writers from threads and processes), the configuration from the environment,
// and timings read from the cache once per process and routed by. GPU (skipped without one): an
// unseen layer probed once and routed by its timings, a second plan and the next process probing
// nothing; nothing probed under CUDA graph capture, the next eager scaled_mm probing.
// The suites run with automatic probing off (tests/autoprobe_off.cpp): each test here sets its own
// configuration and restores the process's.

#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "fp8route/buffer.h"
#include "fp8route/device.h"
#include "fp8route/gemm.h"
#include "fp8route/linear.h"
#include "fp8route/route.h"
#include "route/autoprobe.h"
#include "fp8route/tuning/probe_cache.h"
#include "test_util.h"
#include "fp8route/tuning/gemm_operands.h"

namespace fp8route {
namespace {

namespace fs = std::filesystem;
using probe_cache::Key;

// Before main: route_log reads FP8ROUTE_LOG once per process, and the ignored-file line is checked.
const bool kLogOn = [] { return setenv("FP8ROUTE_LOG", "1", 1) == 0; }();

// A fresh folder under the system's temporary directory, removed at the end of the test.
struct TempDir {
  fs::path path;
  TempDir() {
    std::string t = (fs::temp_directory_path() / "fp8route-autoprobe-XXXXXX").string();
    path = mkdtemp(t.data());
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

// Saves the process's automatic-probing configuration and default router, and puts them back (with
// this process's probe state forgotten) when the test ends.
class AutoProbeTest : public testing::Test {
 protected:
  void SetUp() override {
    saved_config_ = autoprobe_config();
    saved_router_ = default_router();
    autoprobe::forget();
  }
  void TearDown() override {
    set_autoprobe_config(saved_config_);
    set_default_router(saved_router_);
    autoprobe::forget();
  }
  AutoProbeConfig config_in(const fs::path& dir, bool enabled = true) const {
    AutoProbeConfig c = saved_config_;
    c.enabled = enabled, c.cache_dir = dir.string(), c.budget_s = 600;
    return c;
  }

 private:
  AutoProbeConfig saved_config_;
  std::shared_ptr<const Router> saved_router_;
};

TableStamp some_machine() { return {"NVIDIA H200", 132, "13.0", "13.1.0", "0.1.0", "2026-12-01"}; }

// (backend, config) pairs of this build, for measurements a reader accepts.
std::vector<std::pair<std::string, std::string>> build_configs() {
  std::vector<std::pair<std::string, std::string>> out;
  for (const std::string& b : gemm_backends())
    for (const std::string& c : gemm_configs(b)) out.emplace_back(b, c);
  return out;
}

probe_cache::File random_file(std::mt19937_64& rng, const TableStamp& machine, bool with_due = false) {
  probe_cache::File f;
  f.machine = machine;
  f.key = {ScaleKind(rng() % 3), rng() % 2 ? DType::bf16 : DType::f16, int64_t(16 * (1 + rng() % 4096)),
           int64_t(16 * (1 + rng() % 4096))};
  f.caller = rng() % 2 ? "LinearPlan" : "scaled_mm";
  f.seconds = double(rng() % 100000) / 997.0;
  const auto configs = build_configs();
  for (int64_t m : {1, 2, 16, 128, 4096})
    for (size_t i = 0; i < 4; ++i) {
      const auto& [b, c] = configs[(rng() % configs.size())];
      if (std::any_of(f.measured.begin(), f.measured.end(),
                      [&](const Measured& x) { return x.m == m && x.backend == b && x.config == c; }))
        continue;
      f.measured.push_back({m, b, c, 1.0 + double(rng() % 1000000) / 7.0});
    }
  if (with_due && rng() % 2)  // a call-bounded probe leaves M of the grid due
    for (int64_t m : {24, 48, 768, 3072})
      if (rng() % 2) f.due.push_back(m);
  return f;
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void spit(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out << text;
}

// ---- the probe cache file -------------------------------------------------------------------------

TEST(ProbeCache, FileRoundTripsExactly) {
  std::mt19937_64 rng = test::make_rng(1);
  TempDir dir;
  for (int i = 0; i < 20; ++i) {
    const probe_cache::File f = random_file(rng, some_machine(), /*with_due=*/true);
    EXPECT_EQ(probe_cache::parse(probe_cache::text_of(f), "text"), f);
    const std::string path = probe_cache::path_of(dir.path.string(), f.machine, f.key);
    probe_cache::write(path, f);
    std::string why;
    const std::optional<probe_cache::File> back = probe_cache::read(path, f.machine, f.key, why);
    ASSERT_TRUE(back) << why;
    EXPECT_EQ(*back, f);
    EXPECT_EQ(why, "");
  }
  // The path names the machine and the shape; a missing file is no error.
  const Key key{ScaleKind::block, DType::f16, 2432, 2688};
  EXPECT_EQ(probe_cache::path_of("/c", some_machine(), key),
            "/c/probes/NVIDIA_H200-132sm-cuda13.0-cublaslt13.1.0-fp8route0.1.0/block-f16-n2432-k2688.json");
  std::string why = "stale";
  EXPECT_FALSE(probe_cache::read((dir.path / "none.json").string(), some_machine(), key, why));
  EXPECT_EQ(why, "");
}

// Whatever a file holds, read() answers "ignored, because ..." and never throws: a write cut short
// (every prefix of a good file), bytes changed at random, and files that parse but break a rule.
TEST(ProbeCache, DamagedFilesAreIgnoredWithAReason) {
  std::mt19937_64 rng = test::make_rng(2);
  TempDir dir;
  const probe_cache::File f = random_file(rng, some_machine());
  const std::string good = probe_cache::text_of(f);
  const fs::path path = dir.path / "f.json";
  const auto ignored = [&](const std::string& text, const std::string& word) {
    spit(path, text);
    std::string why;
    std::optional<probe_cache::File> got;
    EXPECT_NO_THROW(got = probe_cache::read(path.string(), f.machine, f.key, why));
    EXPECT_FALSE(got) << text;
    EXPECT_NE(why.find(path.string()), std::string::npos) << why;
    EXPECT_NE(why.find(word), std::string::npos) << "'" << word << "' not in: " << why;
  };
  // The text itself (read() is this parse after reading the file; the cases below go through files).
  const auto rejected = [&](const std::string& text) {
    try {
      (void)probe_cache::parse(text, "cut.json");
      return false;
    } catch (const Error& e) {
      EXPECT_EQ(e.category(), ErrorCategory::io_error) << e.what();
      EXPECT_NE(std::string(e.what()).find("probe cache file cut.json: "), std::string::npos) << e.what();
      return true;
    }
  };
  for (size_t len = 0; len + 1 < good.size(); ++len)  // the last byte is a newline: the file is whole without it
    EXPECT_TRUE(rejected(good.substr(0, len))) << "cut at " << len;
  int changed = 0;
  for (int i = 0; i < 300; ++i) {
    std::string t = good;
    t[rng() % t.size()] = char(rng() % 256);
    bool broke = false;
    ASSERT_NO_THROW(broke = rejected(t)) << t;  // nothing but Error(io_error)
    changed += broke;
  }
  EXPECT_GT(changed, 100) << "most random changes break the file";
  const auto edited = [&](const std::string& from, const std::string& to) {
    std::string t = good;
    const size_t at = t.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    return t.replace(at, from.size(), to);
  };
  ignored("", "empty");
  ignored(good.substr(0, good.size() / 2), "truncated JSON");
  ignored(edited("fp8route-probe-cache", "fp8route-routing-table"), "format");
  ignored(edited("\"version\": 1", "\"version\": 2"), "version");
  ignored(edited("\"seconds\": ", "\"seconds\": -"), "probe.seconds");
  const Measured& first = f.measured[0];
  const std::string row = "[" + std::to_string(first.m) + ", \"" + first.backend + "\", \"" + first.config + "\", ";
  const std::string m0 = "[" + std::to_string(first.m) + ", ";
  ignored(edited(row, m0 + "\"" + first.backend + "\", \"no_such_config\", "), "no config");
  ignored(edited(row, m0 + "\"no_such_backend\", \"" + first.config + "\", "), "unknown backend");
  ignored(edited(row, "[0, \"" + first.backend + "\", \"" + first.config + "\", "), "measured[0][0] (m)");
  ignored(edited(row, row + "-"), "measured[0][3] (us)");
  ignored(edited("\"measured\": [\n ", "\"measured\": [\n " + row + "1],\n "), "same (m, backend, config)");
  ignored(edited("\"measured\": [", "\"measured\": [], \"x\": ["), "measured");
  ignored(edited("\"seconds\": ", "\"due\": [48, 24], \"seconds\": "), "probe.due[1]");
  ignored(edited("\"seconds\": ", "\"due\": [0], \"seconds\": "), "probe.due[0]");
  ignored(edited("\"seconds\": ", "\"due\": 48, \"seconds\": "), "probe.due");
  fs::remove(path);
  fs::create_directory(path);  // a folder where the file should be
  std::string why;
  EXPECT_FALSE(probe_cache::read(path.string(), f.machine, f.key, why));
}

// A file probed on another GPU, SM count, CUDA, cuBLASLt or fp8route version is not this machine's;
// another day is (the date only says when). A file of another shape (copied, renamed) is ignored.
TEST(ProbeCache, OtherMachinesVersionsAndShapesAreIgnored) {
  std::mt19937_64 rng = test::make_rng(3);
  TempDir dir;
  const TableStamp here = some_machine();
  const probe_cache::File f = random_file(rng, here);
  const std::string path = probe_cache::path_of(dir.path.string(), here, f.key);
  std::vector<TableStamp> others(5, here);
  others[0].gpu = "NVIDIA H100 80GB HBM3", others[1].sm_count = 114, others[2].cuda = "12.8",
  others[3].cublaslt = "12.9.1", others[4].fp8route = "0.2.0";
  for (const TableStamp& other : others) {
    probe_cache::File g = f;
    g.machine = other;
    probe_cache::write(path, g);
    std::string why;
    EXPECT_FALSE(probe_cache::read(path, here, f.key, why));
    EXPECT_NE(why.find("not this machine"), std::string::npos) << why;
    // The machine's folder differs too: a reader on that machine looks elsewhere.
    EXPECT_NE(probe_cache::path_of(dir.path.string(), other, f.key), path);
  }
  probe_cache::File g = f;
  g.machine.date = "2030-01-01";
  probe_cache::write(path, g);
  std::string why;
  EXPECT_TRUE(probe_cache::read(path, here, f.key, why)) << why;
  Key other_key = f.key;
  other_key.n += 16;
  EXPECT_FALSE(probe_cache::read(path, here, other_key, why));
  EXPECT_NE(why.find("holds " + probe_cache::to_string(f.key)), std::string::npos) << why;
}

// Writers of one file from several threads and processes at once, readers alongside: every read
// finds a whole file of one writer (or none yet), the last file reads back, no temporary file stays.
TEST(ProbeCache, ConcurrentWritersLeaveAWholeFile) {
  std::mt19937_64 rng = test::make_rng(4);
  TempDir dir;
  const TableStamp here = some_machine();
  const probe_cache::File base = random_file(rng, here);
  const std::string path = probe_cache::path_of(dir.path.string(), here, base.key);
  // Writer w's j-th file: its times scaled by a factor that names (w, j), so a mix of two files
  // shows as times that disagree with the caller.
  const auto version = [&](int w, int j) {
    probe_cache::File f = base;
    f.caller = "writer " + std::to_string(w) + " " + std::to_string(j);
    for (Measured& m : f.measured) m.us *= 1 + w * 1000 + j;
    return f;
  };
  const auto whole = [&](const probe_cache::File& f) {
    int w = -1, j = -1;
    if (std::sscanf(f.caller.c_str(), "writer %d %d", &w, &j) != 2) return false;
    return f == version(w, j);
  };
  constexpr int kThreads = 6, kProcesses = 3, kWrites = 40;
  std::vector<pid_t> children;
  for (int p = 0; p < kProcesses; ++p) {
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {  // the child writes only (no CUDA, no gtest) and leaves at once
      int bad = 0;
      for (int j = 0; j < kWrites; ++j) try {
          probe_cache::write(path, version(100 + p, j));
        } catch (...) {
          ++bad;
        }
      _exit(bad ? 1 : 0);
    }
    children.push_back(pid);
  }
  std::atomic<int> writing{kThreads}, reads{0}, broken{0};
  std::vector<std::thread> threads;
  for (int w = 0; w < kThreads; ++w)
    threads.emplace_back([&, w] {
      for (int j = 0; j < kWrites; ++j) probe_cache::write(path, version(w, j));
      --writing;
    });
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&] {
      while (writing > 0) {
        std::string why;
        const std::optional<probe_cache::File> f = probe_cache::read(path, here, base.key, why);
        if (f) ++reads;
        if ((f && !whole(*f)) || !why.empty()) ++broken;
      }
    });
  for (std::thread& t : threads) t.join();
  for (pid_t pid : children) {
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "a writer process failed";
  }
  EXPECT_EQ(broken, 0) << "a reader saw a partial or mixed file";
  std::string why;
  const std::optional<probe_cache::File> last = probe_cache::read(path, here, base.key, why);
  ASSERT_TRUE(last) << why;
  EXPECT_TRUE(whole(*last));
  size_t files = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir.path)) files += e.is_regular_file();
  EXPECT_EQ(files, 1u) << "temporary files left behind";
  std::printf("%d reads of a whole file while %d threads and %d processes wrote\n", reads.load(), kThreads, kProcesses);
}

TEST(ProbeCache, ListAndClear) {
  std::mt19937_64 rng = test::make_rng(5);
  TempDir dir;
  std::vector<std::string> paths;
  for (int i = 0; i < 3; ++i) {
    const probe_cache::File f = random_file(rng, some_machine());
    paths.push_back(probe_cache::path_of(dir.path.string(), f.machine, f.key));
    probe_cache::write(paths.back(), f);
  }
  spit(fs::path(paths[0]).parent_path() / "broken.json", "{");
  const std::vector<probe_cache::Listed> listed = probe_cache::list(dir.path.string());
  ASSERT_EQ(listed.size(), 4u);
  EXPECT_EQ(std::count_if(listed.begin(), listed.end(), [](const auto& l) { return l.file.has_value(); }), 3);
  EXPECT_EQ(std::count_if(listed.begin(), listed.end(), [](const auto& l) { return !l.error.empty(); }), 1);
  EXPECT_EQ(probe_cache::clear(dir.path.string()), 4u);
  EXPECT_TRUE(probe_cache::list(dir.path.string()).empty());
  EXPECT_EQ(probe_cache::clear(dir.path.string()), 0u);
}

// ---- the configuration --------------------------------------------------------------------------

// Sets (or unsets, for nullptr) environment variables while in scope.
class ScopedEnv {
 public:
  void set(const char* name, const char* value) {
    if (!saved_.count(name)) {
      const char* old = std::getenv(name);
      saved_[name] = old ? std::optional<std::string>(old) : std::nullopt;
    }
    if (value) setenv(name, value, 1);
    else unsetenv(name);
  }
  ~ScopedEnv() {
    for (const auto& [name, value] : saved_)
      if (value) setenv(name.c_str(), value->c_str(), 1);
      else unsetenv(name.c_str());
  }

 private:
  std::map<std::string, std::optional<std::string>> saved_;
};

TEST(AutoProbeConfigEnv, VariablesTurnOffMoveAndBudget) {
  ScopedEnv env;
  env.set("FP8ROUTE_AUTOPROBE", nullptr);
  env.set("FP8ROUTE_AUTOPROBE_BUDGET", nullptr);
  env.set("FP8ROUTE_CACHE_DIR", "/somewhere/cache");
  AutoProbeConfig c = autoprobe::config_from_environment();
  EXPECT_TRUE(c.enabled);
  EXPECT_EQ(c.cache_dir, "/somewhere/cache");
  EXPECT_EQ(c.budget_s, AutoProbeConfig{}.budget_s);
  env.set("FP8ROUTE_AUTOPROBE", "0");
  EXPECT_FALSE(autoprobe::config_from_environment().enabled);
  env.set("FP8ROUTE_AUTOPROBE", "1");
  EXPECT_TRUE(autoprobe::config_from_environment().enabled);
  env.set("FP8ROUTE_CACHE_DIR", nullptr);
  env.set("XDG_CACHE_HOME", "/xdg");
  env.set("HOME", "/home/someone");
  EXPECT_EQ(autoprobe::config_from_environment().cache_dir, "/xdg/fp8route");
  env.set("XDG_CACHE_HOME", "relative");  // the XDG specification ignores a relative one
  EXPECT_EQ(autoprobe::config_from_environment().cache_dir, "/home/someone/.cache/fp8route");
  env.set("XDG_CACHE_HOME", nullptr);
  env.set("HOME", nullptr);
  EXPECT_EQ(autoprobe::config_from_environment().cache_dir, "");
  env.set("FP8ROUTE_AUTOPROBE_BUDGET", "30.5");
  EXPECT_EQ(autoprobe::config_from_environment().budget_s, 30.5);
  env.set("FP8ROUTE_AUTOPROBE_BUDGET", "0");
  EXPECT_EQ(autoprobe::config_from_environment().budget_s, 0);
  for (const char* bad : {"soon", "-1", "12s", "inf"}) {
    env.set("FP8ROUTE_AUTOPROBE_BUDGET", bad);
    EXPECT_EQ(autoprobe::config_from_environment().budget_s, AutoProbeConfig{}.budget_s) << bad;
  }
  env.set("FP8ROUTE_AUTOPROBE_CALL_BUDGET", nullptr);
  EXPECT_EQ(autoprobe::config_from_environment().call_budget_s, 2);
  env.set("FP8ROUTE_AUTOPROBE_CALL_BUDGET", "0.25");
  EXPECT_EQ(autoprobe::config_from_environment().call_budget_s, 0.25);
  env.set("FP8ROUTE_AUTOPROBE_CALL_BUDGET", "0");
  EXPECT_EQ(autoprobe::config_from_environment().call_budget_s, 0);
  env.set("FP8ROUTE_AUTOPROBE_CALL_BUDGET", "-3");
  EXPECT_EQ(autoprobe::config_from_environment().call_budget_s, AutoProbeConfig{}.call_budget_s);
  env.set("FP8ROUTE_AUTOPROBE_CALL_BUDGET", nullptr);
}

TEST_F(AutoProbeTest, ConfigurationIsCheckedAndSetForTheProcess) {
  AutoProbeConfig c = autoprobe_config();
  c.budget_s = -1;
  test::expect_invalid([&] { set_autoprobe_config(c); }, "budget_s");
  c.budget_s = 1, c.probe.m_grid.clear();
  test::expect_invalid([&] { set_autoprobe_config(c); }, "m_grid");
  set_autoprobe(true);
  EXPECT_TRUE(autoprobe_config().enabled);
  // Turning it on drops scaled_mm's routes (the default router is set again).
  const uint64_t g = default_router_generation();
  set_autoprobe(false);
  EXPECT_EQ(default_router_generation(), g);
  set_autoprobe(true);
  EXPECT_GT(default_router_generation(), g);
}

// ---- timings from the cache, without a GPU -----------------------------------------------------

// Every backend "runs" everything: routing is decided by the timings alone.
const SupportsFn kAll = [](std::string_view, std::string_view, const GemmProblem&) { return std::string(); };

// A table with a neighbour of `key` but not `key` itself.
Router neighbour_router(const Key& key) {
  RoutingTable t;
  t.stamp = some_machine();
  t.entries.push_back({key.scale, key.out, key.n * 2, key.k, {{4096, "reference", "simt_64x64"}},
                       {{1, "reference", "simt_64x64", 100.0}, {4096, "reference", "simt_64x64", 900.0}}});
  return Router(std::move(t), kAll);
}

ProblemAtM form_of(const Key& key) {
  return [key](int64_t m, const std::string&) { return make_problem(m, key.n, key.k, key.scale, key.out); };
}

TEST_F(AutoProbeTest, CachedTimingsAreReadOncePerProcessAndRouteTheShape) {
  std::mt19937_64 rng = test::make_rng(6);
  TempDir dir;
  set_autoprobe_config(config_in(dir.path));
  const TableStamp here = some_machine();
  const probe_cache::File f = random_file(rng, here);
  const std::string path = probe_cache::path_of(dir.path.string(), here, f.key);
  probe_cache::write(path, f);
  const Router router = neighbour_router(f.key);
  ASSERT_FALSE(autoprobe::has_entry(router.table(), f.key));

  const autoprobe::Timings t = autoprobe::timings(f.key, "LinearPlan", here, router, form_of(f.key), nullptr);
  ASSERT_EQ(t.records.size(), f.measured.size());
  EXPECT_FALSE(t.deferred);
  EXPECT_NE(t.how.find(path), std::string::npos) << t.how;
  std::vector<AutoProbeRecord> recs = autoprobe_records();
  ASSERT_EQ(recs.size(), 1u);
  EXPECT_EQ(recs[0].outcome, AutoProbeRecord::Outcome::cached);
  EXPECT_EQ(recs[0].caller, "LinearPlan");
  EXPECT_EQ(recs[0].file, path);
  EXPECT_EQ(recs[0].seconds, f.seconds);
  EXPECT_EQ(recs[0].timings, f.measured.size());
  EXPECT_EQ(recs[0].m, (std::vector<int64_t>{1, 2, 16, 128, 4096}));

  // Routed by them: at each M, the fastest of the file's timings, as an exact entry.
  const Router routed = router.with_measurements(t.records);
  EXPECT_TRUE(autoprobe::has_entry(routed.table(), f.key));
  for (int64_t m : recs[0].m) {
    const Measured* best = nullptr;
    for (const Measured& x : f.measured)
      if (x.m == m && (!best || x.us < best->us)) best = &x;
    const Route r = routed.select(make_problem(m, f.key.n, f.key.k, f.key.scale, f.key.out));
    EXPECT_EQ(r.source, Route::Source::exact) << r.why;
    EXPECT_EQ(r.backend + "/" + r.config, best->backend + "/" + best->config) << "m=" << m;
  }

  // The process keeps them: the file is not read again (removing it changes nothing), no new record.
  fs::remove(path);
  EXPECT_EQ(autoprobe::timings(f.key, "scaled_mm", here, router, form_of(f.key), nullptr).records.size(),
            f.measured.size());
  EXPECT_EQ(autoprobe_records().size(), 1u);
  // The next process (forget) reads the file again.
  probe_cache::write(path, f);
  autoprobe::forget();
  EXPECT_EQ(autoprobe::timings(f.key, "scaled_mm", here, router, form_of(f.key), nullptr).records.size(),
            f.measured.size());
  recs = autoprobe_records();
  ASSERT_EQ(recs.size(), 1u);
  EXPECT_EQ(recs[0].caller, "scaled_mm");
}

// Off: nothing is read or probed, nothing recorded, whatever the cache holds.
// A cache file a call-bounded probe left with M due: a call whose M has only timed grid M next to
// it routes by the file and probes nothing; one next to a due M probes (here, without a GPU, that
// fails and the shape keeps the file's timings and is not tried again).
TEST_F(AutoProbeTest, DueMAreProbedOnlyByCallsNextToThem) {
  if (cuda_device_count() > 0) GTEST_SKIP() << "on a GPU the call would probe for real (the Python GPU test covers it)";
  std::mt19937_64 rng = test::make_rng(12);
  TempDir dir;
  set_autoprobe_config(config_in(dir.path));
  const TableStamp here = some_machine();
  probe_cache::File f = random_file(rng, here);  // measured at M = 1, 2, 16, 128, 4096
  f.due = {768, 3072};
  const std::string path = probe_cache::path_of(dir.path.string(), here, f.key);
  probe_cache::write(path, f);
  const Router router = neighbour_router(f.key);
  const auto call = [&](int64_t m) {
    return autoprobe::timings(f.key, "scaled_mm", here, router, form_of(f.key), nullptr, {m, 2.0});
  };
  EXPECT_EQ(call(16).records.size(), f.measured.size());
  EXPECT_EQ(call(140).records.size(), f.measured.size());  // next to 128 and 192: 192 is not due
  std::vector<AutoProbeRecord> recs = autoprobe_records();
  ASSERT_EQ(recs.size(), 1u);
  EXPECT_EQ(recs[0].outcome, AutoProbeRecord::Outcome::cached);
  EXPECT_NE(autoprobe::timings(f.key, "scaled_mm", here, router, form_of(f.key), nullptr, {}).how.find("still due"),
            std::string::npos);  // an unbounded caller probes what is due: no GPU, so it fails ...
  recs = autoprobe_records();
  ASSERT_EQ(recs.size(), 2u);
  EXPECT_EQ(recs[1].outcome, AutoProbeRecord::Outcome::failed);
  EXPECT_NE(recs[1].note.find("no GPU"), std::string::npos) << recs[1].note;
  // ... and keeps the file's timings, and is not tried again, next to a due M or not.
  EXPECT_EQ(call(1000).records.size(), f.measured.size());
  EXPECT_EQ(call(3000).records.size(), f.measured.size());
  EXPECT_EQ(autoprobe_records().size(), 2u);
}

// warmup() checks its shape, and without a GPU (nothing to time, no machine to key the cache by)
// it probes nothing and reports nothing.
TEST_F(AutoProbeTest, WarmupChecksItsShapeAndNeedsAGpu) {
  TempDir dir;
  set_autoprobe_config(config_in(dir.path));
  EXPECT_THROW((void)warmup(ScaleKind::row, DType::bf16, 0, 4096), Error);
  EXPECT_THROW((void)warmup(ScaleKind::row, DType::bf16, 4096, -1), Error);
  if (cuda_device_count() > 0) GTEST_SKIP() << "on a GPU warmup probes for real (the Python GPU test covers it)";
  EXPECT_TRUE(warmup(ScaleKind::row, DType::bf16, 2944, 3200).empty());
  EXPECT_TRUE(autoprobe_records().empty());
}

TEST_F(AutoProbeTest, OffReadsAndProbesNothing) {
  std::mt19937_64 rng = test::make_rng(7);
  TempDir dir;
  set_autoprobe_config(config_in(dir.path, /*enabled=*/false));
  const probe_cache::File f = random_file(rng, some_machine());
  probe_cache::write(probe_cache::path_of(dir.path.string(), f.machine, f.key), f);
  const autoprobe::Timings t =
      autoprobe::timings(f.key, "LinearPlan", f.machine, neighbour_router(f.key), form_of(f.key), nullptr);
  EXPECT_TRUE(t.records.empty());
  EXPECT_FALSE(t.deferred);
  EXPECT_TRUE(autoprobe_records().empty());
}

// Another machine's file at this machine's path, or a damaged one, is ignored with one log line, and
// the shape is then due for a probe; with the budget spent it is routed by the table (skipped, no GPU
// asked), once per process.
TEST_F(AutoProbeTest, IgnoredFilesAreLoggedAndAProbeOverBudgetIsSkipped) {
  std::mt19937_64 rng = test::make_rng(8);
  TempDir dir;
  AutoProbeConfig c = config_in(dir.path);
  c.budget_s = 0;
  set_autoprobe_config(c);
  const TableStamp here = some_machine();
  probe_cache::File f = random_file(rng, here);
  f.machine.gpu = "NVIDIA H100 80GB HBM3";
  const std::string path = probe_cache::path_of(dir.path.string(), here, f.key);
  probe_cache::write(path, f);
  const Router router = neighbour_router(f.key);
  testing::internal::CaptureStderr();
  const autoprobe::Timings t = autoprobe::timings(f.key, "LinearPlan", here, router, form_of(f.key), nullptr);
  const autoprobe::Timings again = autoprobe::timings(f.key, "LinearPlan", here, router, form_of(f.key), nullptr);
  const std::string log = testing::internal::GetCapturedStderr();
  EXPECT_TRUE(t.records.empty());
  EXPECT_TRUE(again.records.empty());
  const std::vector<AutoProbeRecord> recs = autoprobe_records();
  ASSERT_EQ(recs.size(), 1u);
  EXPECT_EQ(recs[0].outcome, AutoProbeRecord::Outcome::skipped);
  EXPECT_NE(recs[0].note.find("budget"), std::string::npos) << recs[0].note;
  std::vector<std::string> lines;
  std::istringstream is(log);
  for (std::string line; std::getline(is, line);) lines.push_back(line);
  ASSERT_EQ(lines.size(), 2u) << log;
  EXPECT_EQ(lines[0].rfind("fp8route autoprobe: ignored probe cache file " + path + ": probed on NVIDIA H100", 0), 0u)
      << lines[0];
  EXPECT_NE(lines[1].find("LinearPlan " + probe_cache::to_string(f.key) + ": skipped: "), std::string::npos)
      << lines[1];
  EXPECT_TRUE(fs::exists(path)) << "another machine's file is left alone";

  spit(path, "{\"format\": \"fp8route-probe-cache\", \"vers");  // a damaged file: the same
  autoprobe::forget();
  testing::internal::CaptureStderr();
  EXPECT_TRUE(autoprobe::timings(f.key, "scaled_mm", here, router, form_of(f.key), nullptr).records.empty());
  const std::string log2 = testing::internal::GetCapturedStderr();
  EXPECT_NE(log2.find("fp8route autoprobe: ignored probe cache file " + path + ": "), std::string::npos) << log2;
  EXPECT_NE(log2.find("truncated JSON"), std::string::npos) << log2;
}

// ---- on a GPU ------------------------------------------------------------------------------------

AutoProbeConfig quick(AutoProbeConfig c) {
  c.probe.m_grid = {1, 16, 256};
  c.probe.reps = 5, c.probe.warmup = 2, c.probe.instances = 1;
  return c;
}

// The fastest (backend/config) per M of a cache file.
std::map<int64_t, std::string> fastest_in(const probe_cache::File& f) {
  std::map<int64_t, std::pair<double, std::string>> best;
  for (const Measured& m : f.measured) {
    auto [it, fresh] = best.try_emplace(m.m, m.us, m.backend + "/" + m.config);
    if (!fresh && m.us < it->second.first) it->second = {m.us, m.backend + "/" + m.config};
  }
  std::map<int64_t, std::string> out;
  for (const auto& [m, b] : best) out[m] = b.second;
  return out;
}

TEST_F(AutoProbeTest, GpuUnseenLayerIsProbedOnceAndRoutedByItsTimings) {
  FP8ROUTE_REQUIRE_SM90();
  TempDir dir;
  set_autoprobe_config(quick(config_in(dir.path)));
  const Key key{ScaleKind::row, DType::bf16, 3328, 2560};
  ASSERT_FALSE(autoprobe::has_entry(default_router()->table(), key)) << "the table has this shape: pick another";
  DeviceBuffer w(key.n * key.k), ws(key.n * 4);
  ASSERT_EQ(cudaMemset(w.data(), 0x38, w.bytes()), cudaSuccess);  // 1.0 in E4M3
  ASSERT_EQ(cudaMemset(ws.data(), 0, ws.bytes()), cudaSuccess);
  const TensorView wv = TensorView::contiguous(w.data(), DType::e4m3, {key.n, key.k});
  const TensorView sv = TensorView::contiguous(ws.data(), DType::f32, {key.n});
  const auto routes = [&](const LinearPlan& plan) {
    std::map<int64_t, std::string> out;
    for (int64_t m : {1, 16, 256}) {
      const Route r = plan.route(m);
      EXPECT_EQ(r.source, Route::Source::exact) << "m=" << m << ": " << r.why;
      out[m] = r.backend + "/" + r.config;
    }
    return out;
  };

  const LinearPlan first(wv, sv, ScaleKind::row, DType::bf16);
  std::vector<AutoProbeRecord> recs = autoprobe_records();
  ASSERT_EQ(recs.size(), 1u);
  const AutoProbeRecord probed = recs[0];
  EXPECT_EQ(probed.outcome, AutoProbeRecord::Outcome::probed) << probed.note;
  EXPECT_EQ(probed.caller, "LinearPlan");
  EXPECT_EQ(probed.m, (std::vector<int64_t>{1, 16, 256}));
  EXPECT_GT(probed.seconds, 0);
  const std::string path = probe_cache::path_of(dir.path.string(), *autoprobe::machine_here(), key);
  EXPECT_EQ(probed.file, path) << probed.note;
  std::string why;
  const std::optional<probe_cache::File> file = probe_cache::read(path, *autoprobe::machine_here(), key, why);
  ASSERT_TRUE(file) << why;
  EXPECT_EQ(file->measured.size(), probed.timings);
  EXPECT_EQ(routes(first), fastest_in(*file)) << "routed by the probe's timings";
  EXPECT_NE(first.explain(16).find("automatic probe: probed on this GPU"), std::string::npos) << first.explain(16);
  std::printf("probed %s: %zu timings at %zu M in %.2f s\n", probe_cache::to_string(key).c_str(), probed.timings,
              probed.m.size(), probed.seconds);

  const LinearPlan second(wv, sv, ScaleKind::row, DType::bf16);
  EXPECT_EQ(autoprobe_records().size(), 1u) << "a second plan of the shape probes nothing";
  EXPECT_EQ(routes(second), routes(first));

  autoprobe::forget();  // the next process
  const LinearPlan third(wv, sv, ScaleKind::row, DType::bf16);
  recs = autoprobe_records();
  ASSERT_EQ(recs.size(), 1u);
  EXPECT_EQ(recs[0].outcome, AutoProbeRecord::Outcome::cached);
  EXPECT_EQ(recs[0].seconds, file->seconds);
  EXPECT_EQ(routes(third), routes(first));

  // A router the caller passes is used as given.
  autoprobe::forget();
  const LinearPlan given(wv, sv, ScaleKind::row, DType::bf16, {}, default_router());
  EXPECT_TRUE(autoprobe_records().empty());
  EXPECT_NE(given.route(16).source, Route::Source::exact);
}

// Under graph capture (global mode: a probe's allocation or synchronization would break it) the
// routed scaled_mm routes by the table and probes nothing; the next eager call probes, and the
// process-wide router routes the shape by the timings from then on.
TEST_F(AutoProbeTest, GpuNothingIsProbedUnderGraphCapture) {
  FP8ROUTE_REQUIRE_SM90();
  TempDir dir;
  const Key key{ScaleKind::tensor, DType::bf16, 1536, 5120};
  ASSERT_FALSE(autoprobe::has_entry(default_router()->table(), key)) << "the table has this shape: pick another";
  const GemmProblem p = make_problem(16, key.n, key.k, key.scale, key.out);
  const timing::GemmOperandSets ops = timing::make_gemm_operands(p, 1, test::make_rng(9)());
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  set_autoprobe_config(quick(config_in(dir.path, /*enabled=*/false)));
  scaled_mm(ops.args[0], stream);  // the first call of the problem, outside capture (lazy set-up)
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  set_autoprobe_config(quick(config_in(dir.path)));

  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), cudaSuccess);
  scaled_mm(ops.args[0], stream);
  ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess) << "the capture was broken";
  EXPECT_TRUE(autoprobe_records().empty()) << "probed under capture";
  const std::string path = probe_cache::path_of(dir.path.string(), *autoprobe::machine_here(), key);
  EXPECT_FALSE(fs::exists(path));
  EXPECT_NE(default_router()->select(p).source, Route::Source::exact);
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);

  scaled_mm(ops.args[0], stream);  // eager: probes now
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  std::vector<AutoProbeRecord> recs = autoprobe_records();
  ASSERT_EQ(recs.size(), 1u);
  EXPECT_EQ(recs[0].outcome, AutoProbeRecord::Outcome::probed) << recs[0].note;
  EXPECT_EQ(recs[0].caller, "scaled_mm");
  std::string why;
  const std::optional<probe_cache::File> file = probe_cache::read(path, *autoprobe::machine_here(), key, why);
  ASSERT_TRUE(file) << why;
  const Route r = default_router()->select(p);
  EXPECT_EQ(r.source, Route::Source::exact) << r.why;
  EXPECT_EQ(r.backend + "/" + r.config, fastest_in(*file).at(16));
  scaled_mm(ops.args[0], stream);
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  EXPECT_EQ(autoprobe_records().size(), 1u) << "probed twice";
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

}  // namespace
}  // namespace fp8route
