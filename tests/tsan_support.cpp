// Linked into the ThreadSanitizer suites only (tests/CMakeLists.txt, tests/tsan/<suite>; docs/design.md,
// "Sanitizers"):
// - each report ThreadSanitizer prints fails the test during which it was printed (a JUnit failure
//   that scripts/test_summary.py counts), besides the runtime's exit code 66 at the end;
// - the function-local statics of the library's CUDA objects that a run without a GPU reaches (the
//   backends and their config name lists) are made on the main thread before any test starts
//   threads: those objects are not instrumented, and the inline check of a static's guard there is
//   the one acquire they hide from ThreadSanitizer;
// - FP8ROUTE_TSAN_DELIBERATE_RACE=1 adds a test that races on purpose in library code (ctest
//   tsan_catches_a_race, also run by scripts/tsan.sh: the race must be reported and fail the test).

#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>

#include <unistd.h>

#include "fp8route/route.h"
#include "gemm/backend.h"

namespace {

std::atomic<int> g_reports{0};

}  // namespace

// Called by the ThreadSanitizer runtime for each report it prints (a weak default there).
extern "C" __attribute__((no_sanitize_thread)) void __tsan_on_report(const void*) {
  g_reports.fetch_add(1, std::memory_order_relaxed);
}

// Defaults; TSAN_OPTIONS overrides them.
extern "C" const char* __tsan_default_options() { return "halt_on_error=0:second_deadlock_stack=1"; }

namespace {

class FailOnReport : public testing::EmptyTestEventListener {
  void OnTestStart(const testing::TestInfo&) override { before_ = g_reports.load(); }
  void OnTestEnd(const testing::TestInfo&) override {
    const int n = g_reports.load() - before_;
    if (n > 0) ADD_FAILURE() << "ThreadSanitizer printed " << n << " report(s) during this test (above)";
  }
  int before_ = 0;
};

class MakeStatics : public testing::Environment {
  void SetUp() override {
    for (const fp8route::gemm::GemmBackend* b : fp8route::gemm::all_backends()) (void)b->configs();
  }
};

// One thread saves a table while another changes it: the read in the library's table writer
// (table.cpp, instrumented in fp8route_host_tsan) races with the test's write.
void deliberate_race() {
  fp8route::RoutingTable t;
  const std::string path =
      (std::filesystem::temp_directory_path() / ("fp8route-tsan-race-" + std::to_string(getpid()) + ".json")).string();
  std::thread reader([&] { fp8route::save_routing_table(t, path); });
  std::thread writer([&] { t.stamp.sm_count = 132; });
  reader.join();
  writer.join();
  std::filesystem::remove(path);
}

const bool kRegistered = [] {
  testing::UnitTest::GetInstance()->listeners().Append(new FailOnReport);
  testing::AddGlobalTestEnvironment(new MakeStatics);
  const char* race = std::getenv("FP8ROUTE_TSAN_DELIBERATE_RACE");
  if (race && std::string(race) == "1")
    testing::RegisterTest("TsanSetup", "DeliberateRace", nullptr, nullptr, __FILE__, __LINE__,
                          []() -> testing::Test* {
                            struct T : testing::Test {
                              void TestBody() override { deliberate_race(); }
                            };
                            return new T;
                          });
  return true;
}();

}  // namespace
