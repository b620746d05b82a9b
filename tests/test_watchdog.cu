// Nothing the library times on a user's behalf waits for the GPU without a bound:
// - measure_interleaved reports an op whose kernel does not finish within MeasureOptions::timeout_s
//   as stalled, times none of the ops of that measurement (no 0 us that would rank first), and the
//   thread's next measurement runs on a fresh stream while the stuck one still holds the kernel.
// - A quarantined (backend, config) is refused for its shape and never chosen by the router.
// The stuck kernel spins on a flag in mapped host memory that the test raises afterwards (and gives
// up by itself after a minute of GPU clock, so that a failing test cannot hang the suite).

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "fp8route/gemm.h"
#include "fp8route/route.h"
#include "gemm/backend.h"
#include "gpu_util.h"
#include "test_util.h"
#include "fp8route/tuning/measure.h"

namespace fp8route {
namespace {

__global__ void spin_until(const volatile int* flag, long long max_cycles) {
  const long long t0 = clock64();
  while (*flag == 0 && clock64() - t0 < max_cycles) {
  }
}

__global__ void touch(int* p) { *p += 1; }

struct MappedFlag {
  int* host = nullptr;
  int* device = nullptr;
  MappedFlag() {
    if (cudaHostAlloc(&host, sizeof(int), cudaHostAllocMapped) != cudaSuccess) return;
    *host = 0;
    if (cudaHostGetDevicePointer(&device, host, 0) != cudaSuccess) device = nullptr;
  }
  ~MappedFlag() {
    if (host) cudaFreeHost(host);
  }
  void raise() { *reinterpret_cast<volatile int*>(host) = 1; }
};

TEST(Watchdog, StuckOpIsReportedStalledAndNothingIsTimed) {
  FP8ROUTE_REQUIRE_SM90();
  MappedFlag flag;
  ASSERT_NE(flag.device, nullptr) << "mapped host memory";
  DeviceBuffer counter(sizeof(int));
  FP8ROUTE_TEST_CUDA(cudaMemset(counter.data(), 0, sizeof(int)));
  int* c = static_cast<int*>(counter.data());
  const long long minute = 60LL * 2'000'000'000LL;  // cycles, at 2 GHz
  const timing::Enqueue quick = [c](int, cudaStream_t s) { touch<<<1, 1, 0, s>>>(c); };
  const timing::Enqueue stuck = [&](int, cudaStream_t s) { spin_until<<<1, 32, 0, s>>>(flag.device, minute); };

  timing::MeasureOptions mo;
  mo.timeout_s = 0.5, mo.warmup = 1, mo.reps = 3;
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<timing::Measurement> ms = timing::measure_interleaved({quick, stuck, quick}, 1, mo);
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  flag.raise();  // let the stuck kernel go

  ASSERT_EQ(ms.size(), 3u);
  EXPECT_TRUE(ms[1].stalled);
  EXPECT_NE(ms[1].error.find("did not finish within"), std::string::npos) << ms[1].error;
  for (size_t i : {0, 2}) {
    EXPECT_FALSE(ms[i].stalled) << i;
    EXPECT_FALSE(ms[i].error.empty()) << "op " << i << " reported as timed (" << ms[i].median_us << " us)";
  }
  EXPECT_LT(waited, 10.0) << "the measurement waited for the stuck op";

  // The next measurement of this thread runs on a fresh stream (the old one may still be busy).
  const std::vector<timing::Measurement> again = timing::measure_interleaved({quick}, 1, mo);
  ASSERT_EQ(again.size(), 1u);
  EXPECT_TRUE(again[0].error.empty()) << again[0].error;
  EXPECT_GT(again[0].median_us, 0);
  FP8ROUTE_TEST_CUDA(cudaDeviceSynchronize());
}

TEST(Watchdog, QuarantinedConfigIsRefusedAndNotRouted) {
  FP8ROUTE_REQUIRE_SM90();
  // A shape of its own (no other test of the process runs it), at row scales.
  const GemmProblem p = make_problem(8, 3072, 1664, ScaleKind::row, DType::bf16);
  const Router router = default_router()->with_measurements({});
  const Route before = router.select(p);
  ASSERT_FALSE(before.backend.empty());
  const gemm::GemmBackend& b = gemm::find_backend(before.backend);
  const int config = gemm::find_config(b, before.config);
  ASSERT_EQ(gemm::cannot_run_reason(b, config, p), "");

  gemm::quarantine(before.backend, before.config, p, "test: did not finish within 10 s");
  EXPECT_NE(gemm::cannot_run_reason(b, config, p).find("did not finish"), std::string::npos);
  const GemmProblem other_n = make_problem(8, 3072 + 128, 1664, ScaleKind::row, DType::bf16);
  EXPECT_EQ(gemm::quarantine_reason(before.backend, before.config, other_n), "") << "another shape is not quarantined";
  const Route after = router.select(p);
  EXPECT_FALSE(after.backend == before.backend && after.config == before.config)
      << "routed to the quarantined " << before.backend << "/" << before.config;
}

}  // namespace
}  // namespace fp8route
