#include "bench/measure.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/cuda_check.h"
#include "fp8route/device.h"

namespace fp8route::bench {

int rotation_sets(int64_t bytes_per_call, const MeasureOptions& opt) {
  const double l2 = static_cast<double>(device_info(-1).l2_bytes);
  const double want = std::ceil(opt.l2_multiple * l2 / std::max<double>(1.0, static_cast<double>(bytes_per_call)));
  return static_cast<int>(std::clamp<double>(want, 3, opt.max_sets));
}

Measurement measure(const std::function<void(int, cudaStream_t)>& enqueue, int sets,
                    const MeasureOptions& opt) {
  // One stream per thread for every measurement: libraries keep per-stream state (cuBLASLt's
  // workspace), which a fresh stream per measurement would multiply.
  thread_local const cudaStream_t stream = [] {
    cudaStream_t st;
    FP8ROUTE_CUDA_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    return st;
  }();
  cudaGraphExec_t exec = nullptr;
  auto run_once = [&] {
    if (exec) {
      FP8ROUTE_CUDA_CHECK(cudaGraphLaunch(exec, stream));
    } else {
      for (int i = 0; i < sets; ++i) enqueue(i, stream);
    }
  };
  if (opt.graph) {
    for (int i = 0; i < sets; ++i) enqueue(i, stream);  // first calls outside the graph: lazy init
    FP8ROUTE_CUDA_CHECK(cudaStreamSynchronize(stream));
    cudaGraph_t graph;
    FP8ROUTE_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < sets; ++i) enqueue(i, stream);
    FP8ROUTE_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
    FP8ROUTE_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    FP8ROUTE_CUDA_CHECK(cudaGraphDestroy(graph));
  }
  for (int i = 0; i < opt.warmup; ++i) run_once();
  std::vector<cudaEvent_t> ev(2 * opt.reps);
  for (auto& e : ev) FP8ROUTE_CUDA_CHECK(cudaEventCreate(&e));
  for (int r = 0; r < opt.reps; ++r) {
    FP8ROUTE_CUDA_CHECK(cudaEventRecord(ev[2 * r], stream));
    run_once();
    FP8ROUTE_CUDA_CHECK(cudaEventRecord(ev[2 * r + 1], stream));
  }
  FP8ROUTE_CUDA_CHECK(cudaStreamSynchronize(stream));
  std::vector<double> us(opt.reps);
  for (int r = 0; r < opt.reps; ++r) {
    float ms = 0;
    FP8ROUTE_CUDA_CHECK(cudaEventElapsedTime(&ms, ev[2 * r], ev[2 * r + 1]));
    us[r] = ms * 1000.0 / sets;
  }
  for (auto& e : ev) cudaEventDestroy(e);
  if (exec) cudaGraphExecDestroy(exec);
  std::sort(us.begin(), us.end());
  Measurement m;
  m.median_us = opt.reps % 2 ? us[opt.reps / 2] : 0.5 * (us[opt.reps / 2 - 1] + us[opt.reps / 2]);
  m.min_us = us.front();
  m.max_us = us.back();
  m.sets = sets;
  m.reps = opt.reps;
  m.graph = opt.graph;
  return m;
}

}  // namespace fp8route::bench
