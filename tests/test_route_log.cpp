// Routing diagnostics (fp8route/tuning/route_log.h), CPU: the warning for a table measured on another
// GPU model, and FP8ROUTE_LOG's line per distinct decision. The routed scaled_mm and LinearPlan
// call route_log::decided on a GPU only (tests/python/test_cli_conventions.py checks their lines
// there); here it is called as they call it, with a router that decides without a GPU.

#include <gtest/gtest.h>

#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "fp8route/device.h"
#include "fp8route/route.h"
#include "fp8route/tuning/route_log.h"
#include "test_util.h"

namespace fp8route {
namespace {

// Before main: route_log::enabled() reads FP8ROUTE_LOG once per process.
const bool kLogOn = [] { return setenv("FP8ROUTE_LOG", "1", 1) == 0; }();

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream is(text);
  for (std::string line; std::getline(is, line);) out.push_back(line);
  return out;
}

// A router over one measured entry whose backends all "run" (no GPU is asked), stamped `gpu`.
Router one_entry_router(const std::string& gpu, int64_t n, int64_t k) {
  RoutingTable t;
  t.stamp.gpu = gpu;
  t.entries.push_back({ScaleKind::row, DType::bf16, n, k, {{64, "cublaslt", "heuristic"}},
                       {{64, "cublaslt", "heuristic", 10.0}}});
  return Router(t, [](std::string_view, std::string_view, const GemmProblem&) { return std::string(); });
}

TEST(RouteLog, GpuMismatchWarningNamesBothModelsOnlyWhenTheyDiffer) {
  const std::string w = route_log::gpu_mismatch_warning("NVIDIA H200", "NVIDIA H100 80GB HBM3");
  EXPECT_NE(w.find("NVIDIA H200"), std::string::npos) << w;
  EXPECT_NE(w.find("NVIDIA H100 80GB HBM3"), std::string::npos) << w;
  EXPECT_EQ(w.find('\n'), std::string::npos) << w;
  EXPECT_NE(route_log::gpu_mismatch_warning("NVIDIA H200", "NVIDIA H200 NVL"), "");  // another model
  EXPECT_EQ(route_log::gpu_mismatch_warning("NVIDIA H200", "NVIDIA H200"), "");
  EXPECT_EQ(route_log::gpu_mismatch_warning(" NVIDIA H200", "nvidia h200 "), "");
  EXPECT_EQ(route_log::gpu_mismatch_warning("", "NVIDIA H200"), "");  // a table without a stamp
  EXPECT_EQ(route_log::gpu_mismatch_warning("NVIDIA H200", ""), "");  // no GPU
}

TEST(RouteLog, DecisionLineHasShapeScaleOutChoiceAndSource) {
  std::mt19937_64 rng = test::make_rng(1);
  const int64_t m = 1 + rng() % 16384, n = 16 * (1 + rng() % 8192), k = 16 * (1 + rng() % 8192);
  GemmProblem p = make_problem(m, n, k, ScaleKind::block, DType::f16);
  const Route r{"skinny", "m8_n32_k128x4_splitk", Route::Source::nearest, "why"};
  EXPECT_EQ(route_log::decision_line("LinearPlan", p, r),
            "fp8route route: LinearPlan m=" + std::to_string(m) + " n=" + std::to_string(n) + " k=" +
                std::to_string(k) + " scale=block out=f16 -> skinny/m8_n32_k128x4_splitk (nearest)");
  p.bias = true, p.align = 8;
  const std::string line = route_log::decision_line("scaled_mm", p, r);
  EXPECT_NE(line.find(" out=f16 bias align=8 -> "), std::string::npos) << line;
}

TEST(RouteLog, EachDistinctDecisionIsLoggedOnce) {
  ASSERT_TRUE(kLogOn && route_log::enabled());
  std::mt19937_64 rng = test::make_rng(2);
  const int64_t n = 128 * (1 + rng() % 64), k = 128 * (1 + rng() % 64);
  const Router router = one_entry_router("", n, k);  // no stamp: no GPU warning, whatever the machine
  const GemmProblem a = make_problem(1 + rng() % 64, n, k, ScaleKind::row, DType::bf16);
  const GemmProblem b = make_problem(a.m + 64, n, k, ScaleKind::row, DType::bf16);
  testing::internal::CaptureStderr();
  for (int i = 0; i < 3; ++i) {
    route_log::decided("scaled_mm", router, a, router.select(a));
    route_log::decided("LinearPlan", router, a, router.select(a));
    route_log::decided("scaled_mm", router, b, router.select(b));
  }
  const std::vector<std::string> got = lines_of(testing::internal::GetCapturedStderr());
  const std::vector<std::string> want = {route_log::decision_line("scaled_mm", a, router.select(a)),
                                         route_log::decision_line("LinearPlan", a, router.select(a)),
                                         route_log::decision_line("scaled_mm", b, router.select(b))};
  EXPECT_EQ(got, want);
  EXPECT_NE(want[0].find("-> cublaslt/heuristic (exact)"), std::string::npos) << want[0];
}

TEST(RouteLog, ATableOfAnotherGpuIsWarnedAboutOnceWhereThereIsAGpu) {
  const std::string other = "fp8route test GPU " + std::to_string(test::make_rng(3)() % 1000);
  const Router router = one_entry_router(other, 4096, 4096);
  testing::internal::CaptureStderr();
  for (int64_t m : {1, 2, 3}) {
    const GemmProblem p = make_problem(m, 4096, 4096, ScaleKind::row, DType::bf16);
    route_log::decided("scaled_mm", router, p, router.select(p));
  }
  int warnings = 0;
  for (const std::string& line : lines_of(testing::internal::GetCapturedStderr()))
    if (line.rfind("fp8route warning:", 0) == 0) {
      ++warnings;
      EXPECT_NE(line.find(other), std::string::npos) << line;
      EXPECT_NE(line.find(device_info().name), std::string::npos) << line;
    }
  // Without a GPU there is no device to compare with: the table is not flagged.
  EXPECT_EQ(warnings, cuda_device_count() > 0 ? 1 : 0);
}

}  // namespace
}  // namespace fp8route
