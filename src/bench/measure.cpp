#include "bench/measure.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/cuda_check.h"
#include "fp8route/device.h"
#include "fp8route/error.h"

namespace fp8route::bench {

int rotation_sets(int64_t bytes_per_call, const MeasureOptions& opt) {
  const double l2 = static_cast<double>(device_info(-1).l2_bytes);
  const double want = std::ceil(opt.l2_multiple * l2 / std::max<double>(1.0, static_cast<double>(bytes_per_call)));
  return static_cast<int>(std::clamp<double>(want, 3, opt.max_sets));
}

std::vector<Measurement> measure_interleaved(const std::vector<Enqueue>& ops, int sets, const MeasureOptions& opt) {
  // One stream per thread for every measurement: libraries keep per-stream state (cuBLASLt's
  // workspace), which a fresh stream per measurement would multiply.
  thread_local const cudaStream_t stream = [] {
    cudaStream_t st;
    FP8ROUTE_CUDA_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    return st;
  }();
  const size_t n = ops.size();
  std::vector<Measurement> out(n);
  std::vector<cudaGraphExec_t> exec(n, nullptr);
  std::vector<bool> live(n, false);
  for (size_t o = 0; o < n; ++o) {
    try {
      for (int i = 0; i < sets; ++i) ops[o](i, stream);  // first calls outside the graph: lazy init
      FP8ROUTE_CUDA_CHECK(cudaStreamSynchronize(stream));
      if (opt.graph) {
        cudaGraph_t graph;
        FP8ROUTE_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
        try {
          for (int i = 0; i < sets; ++i) ops[o](i, stream);
        } catch (...) {
          cudaStreamEndCapture(stream, &graph);  // leave the stream usable
          if (graph) cudaGraphDestroy(graph);
          throw;
        }
        FP8ROUTE_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
        FP8ROUTE_CUDA_CHECK(cudaGraphInstantiate(&exec[o], graph, 0));
        FP8ROUTE_CUDA_CHECK(cudaGraphDestroy(graph));
      }
      live[o] = true;
    } catch (const std::exception& e) {
      out[o].error = e.what();
    }
  }
  auto run_once = [&](size_t o) {
    if (exec[o]) {
      FP8ROUTE_CUDA_CHECK(cudaGraphLaunch(exec[o], stream));
    } else {
      for (int i = 0; i < sets; ++i) ops[o](i, stream);
    }
  };
  for (int w = 0; w < opt.warmup; ++w)
    for (size_t o = 0; o < n; ++o)
      if (live[o]) run_once(o);
  // Round robin: replay r of every op before replay r + 1 of any, so that a drift of the clocks
  // during the run (the H200 moves by ~10% within seconds under sustained load) shifts every op alike.
  std::vector<cudaEvent_t> ev(2 * opt.reps * n);
  for (auto& e : ev) FP8ROUTE_CUDA_CHECK(cudaEventCreate(&e));
  for (int r = 0; r < opt.reps; ++r)
    for (size_t o = 0; o < n; ++o) {
      if (!live[o]) continue;
      FP8ROUTE_CUDA_CHECK(cudaEventRecord(ev[2 * (r * n + o)], stream));
      run_once(o);
      FP8ROUTE_CUDA_CHECK(cudaEventRecord(ev[2 * (r * n + o) + 1], stream));
    }
  FP8ROUTE_CUDA_CHECK(cudaStreamSynchronize(stream));
  for (size_t o = 0; o < n; ++o) {
    if (!live[o]) continue;
    std::vector<double> us(opt.reps);
    for (int r = 0; r < opt.reps; ++r) {
      float ms = 0;
      FP8ROUTE_CUDA_CHECK(cudaEventElapsedTime(&ms, ev[2 * (r * n + o)], ev[2 * (r * n + o) + 1]));
      us[r] = ms * 1000.0 / sets;
    }
    std::sort(us.begin(), us.end());
    Measurement& m = out[o];
    m.median_us = opt.reps % 2 ? us[opt.reps / 2] : 0.5 * (us[opt.reps / 2 - 1] + us[opt.reps / 2]);
    m.min_us = us.front();
    m.max_us = us.back();
    m.sets = sets;
    m.reps = opt.reps;
    m.graph = opt.graph;
  }
  for (auto& e : ev) cudaEventDestroy(e);
  for (cudaGraphExec_t e : exec)
    if (e) cudaGraphExecDestroy(e);
  return out;
}

Measurement measure(const Enqueue& enqueue, int sets, const MeasureOptions& opt) {
  Measurement m = measure_interleaved({enqueue}, sets, opt)[0];
  FP8ROUTE_CHECK_CAT(m.error.empty(), ErrorCategory::cuda_error, m.error);
  return m;
}

}  // namespace fp8route::bench
