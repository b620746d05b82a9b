// Host threads on their own CUDA streams, each running different problems on different backends
// and configs at once, get the bits they get alone. Every backend of this build takes part with up
// to eight of its configs, each on a problem it supports from a mix of real layer shapes and scale
// kinds; the jobs are dealt round robin to eight threads, so that different kernels run side by
// side on the GPU, and each thread also runs the routed scaled_mm and a dynamic per-tensor quant
// (which reduces through a scratch buffer) every fourth repetition. A job's output is poisoned
// before every run and compared bitwise on the GPU with the output of a run made alone before the
// threads started (a compare kernel on the thread's stream adds the differing bytes to a counter),
// so an intermittent race anywhere in a repetition is counted, not sampled.

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "fp8route/tuning/cuda_check.h"
#include "fp8route/buffer.h"
#include "fp8route/gemm.h"
#include "fp8route/quant.h"
#include "gemm/backend.h"
#include "gpu_util.h"
#include "test_util.h"
#include "fp8route/tuning/gemm_operands.h"

namespace fp8route {
namespace {

__global__ void count_differences(const uint8_t* got, const uint8_t* want, size_t bytes, unsigned long long* diffs) {
  unsigned long long mine = 0;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < bytes; i += size_t(gridDim.x) * blockDim.x)
    mine += got[i] != want[i];
  if (mine) atomicAdd(diffs, mine);
}

void compare_on(cudaStream_t s, const void* got, const void* want, size_t bytes, unsigned long long* diffs) {
  count_differences<<<64, 256, 0, s>>>(static_cast<const uint8_t*>(got), static_cast<const uint8_t*>(want), bytes,
                                        diffs);
}

struct Job {
  std::string backend, config;  // "" backend: the routed scaled_mm
  GemmProblem p;
  timing::GemmOperandSets ops;
  DeviceBuffer want;
  size_t out_bytes = 0;
};

// A per-tensor dynamic quant of a thread's own bf16 input, checked the same way (codes and scale).
struct QuantJob {
  DeviceBuffer x, q, scale, want_q, want_scale;
  int64_t elems = 0;
  void run(cudaStream_t s) {
    per_tensor_quant_dynamic(TensorView::contiguous(x.data(), DType::bf16, {elems / 1024, 1024}),
                             TensorView::contiguous(q.data(), DType::e4m3, {elems / 1024, 1024}),
                             TensorView::contiguous(scale.data(), DType::f32, {1}), s);
  }
};

std::vector<GemmProblem> mixed_problems() {
  return {make_problem(1, 4096, 4096, ScaleKind::row),      make_problem(4, 6144, 4096, ScaleKind::row),
          make_problem(16, 4096, 14336, ScaleKind::tensor), make_problem(32, 28672, 4096, ScaleKind::row),
          make_problem(64, 4096, 4096, ScaleKind::block),   make_problem(128, 1024, 8192, ScaleKind::row),
          make_problem(8, 2112, 7168, ScaleKind::block),    make_problem(256, 14336, 4096, ScaleKind::tensor),
          make_problem(1000, 4096, 4096, ScaleKind::row),   make_problem(2, 1024, 4096, ScaleKind::tensor)};
}

TEST(Streams, ThreadsOnTheirOwnStreamsGetTheBitsTheyGetAlone) {
  FP8ROUTE_REQUIRE_SM90();
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<GemmProblem> problems = mixed_problems();
  std::vector<std::unique_ptr<Job>> jobs;
  uint64_t seed = test::make_rng(43)();
  const auto add = [&](const std::string& backend, const std::string& config, const GemmProblem& p) {
    auto j = std::make_unique<Job>();
    j->backend = backend, j->config = config, j->p = p;
    j->ops = timing::make_gemm_operands(p, 1, seed++);
    j->out_bytes = size_t(p.m) * p.n * dtype_size(p.out);
    j->want = DeviceBuffer(j->out_bytes);
    jobs.push_back(std::move(j));
  };
  for (const gemm::GemmBackend* b : gemm::all_backends()) {
    const int configs = int(b->configs().size());
    const int step = std::max(1, configs / 8);
    for (int c = 0; c < configs; c += step) {
      // Each config on the first problem of the mix it supports, the reference kernel on small ones.
      for (size_t i = 0; i < problems.size(); ++i) {
        const GemmProblem& p = problems[(c + i) % problems.size()];
        if (b->slow_fallback() && p.m * p.n * p.k > (int64_t(1) << 31)) continue;
        if (!gemm::cannot_run_reason(*b, c, p).empty()) continue;
        add(std::string(b->name()), b->configs()[c], p);
        break;
      }
    }
  }
  for (const GemmProblem& p : problems) add("", "", p);  // routed
  ASSERT_GT(jobs.size(), 10u);
  std::printf("%zu jobs over %zu backends\n", jobs.size(), gemm::all_backends().size());

  const auto run = [](Job& j, cudaStream_t s) {
    if (j.backend.empty()) scaled_mm(j.ops.args[0], s);
    else scaled_mm(j.ops.args[0], j.backend, j.config, s);
  };
  // Alone, one after the other: the bits every later run must give.
  for (auto& j : jobs) {
    run(*j, nullptr);
    FP8ROUTE_TEST_CUDA(cudaMemcpy(j->want.data(), j->ops.out[0].data(), j->out_bytes, cudaMemcpyDeviceToDevice));
  }
  constexpr int kThreads = 8, kReps = 60;
  std::vector<QuantJob> quants(kThreads);
  std::mt19937_64 rng = test::make_rng(44);
  for (QuantJob& q : quants) {
    q.elems = int64_t(64 + rng() % 64) * 1024;
    const std::vector<uint8_t> x = test::random_activations(DType::bf16, q.elems, rng);
    q.x = test::upload(x.data(), x.size());
    q.q = DeviceBuffer(q.elems), q.scale = DeviceBuffer(4), q.want_q = DeviceBuffer(q.elems), q.want_scale = DeviceBuffer(4);
    q.run(nullptr);
    FP8ROUTE_TEST_CUDA(cudaMemcpy(q.want_q.data(), q.q.data(), q.elems, cudaMemcpyDeviceToDevice));
    FP8ROUTE_TEST_CUDA(cudaMemcpy(q.want_scale.data(), q.scale.data(), 4, cudaMemcpyDeviceToDevice));
  }
  FP8ROUTE_TEST_CUDA(cudaDeviceSynchronize());

  DeviceBuffer counters(sizeof(unsigned long long) * (jobs.size() + kThreads));
  FP8ROUTE_TEST_CUDA(cudaMemset(counters.data(), 0, counters.bytes()));
  auto* diffs = static_cast<unsigned long long*>(counters.data());
  std::vector<std::string> errors(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      cudaStream_t s = nullptr;
      if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess) {
        errors[t] = "cudaStreamCreate failed";
        return;
      }
      try {
        for (int r = 0; r < kReps; ++r) {
          for (size_t i = t; i < jobs.size(); i += kThreads) {
            Job& j = *jobs[i];
            FP8ROUTE_CUDA_CHECK(cudaMemsetAsync(j.ops.out[0].data(), 0xA5, j.out_bytes, s));
            run(j, s);
            compare_on(s, j.ops.out[0].data(), j.want.data(), j.out_bytes, diffs + i);
          }
          if (r % 4 == 3) {
            QuantJob& q = quants[t];
            FP8ROUTE_CUDA_CHECK(cudaMemsetAsync(q.q.data(), 0xA5, q.elems, s));
            q.run(s);
            compare_on(s, q.q.data(), q.want_q.data(), q.elems, diffs + jobs.size() + t);
            compare_on(s, q.scale.data(), q.want_scale.data(), 4, diffs + jobs.size() + t);
          }
        }
        FP8ROUTE_CUDA_CHECK(cudaStreamSynchronize(s));
      } catch (const std::exception& e) {
        errors[t] = e.what();
      }
      cudaStreamDestroy(s);
    });
  for (std::thread& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(errors[t], "") << "thread " << t;
  std::vector<unsigned long long> got(jobs.size() + kThreads);
  FP8ROUTE_TEST_CUDA(cudaMemcpy(got.data(), diffs, got.size() * sizeof(got[0]), cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < jobs.size(); ++i)
    EXPECT_EQ(got[i], 0u) << (jobs[i]->backend.empty() ? std::string("routed") : jobs[i]->backend + "/" + jobs[i]->config)
                          << " on " << to_string(jobs[i]->p) << " (thread " << i % kThreads << "): " << got[i]
                          << " differing bytes over " << kReps << " runs";
  for (int t = 0; t < kThreads; ++t)
    EXPECT_EQ(got[jobs.size() + t], 0u) << "per-tensor dynamic quant of thread " << t;
  std::printf("%d threads x %d repetitions in %.1f s\n", kThreads, kReps,
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
}

}  // namespace
}  // namespace fp8route
