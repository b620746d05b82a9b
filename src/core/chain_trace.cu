// Host side of the chain trace (fp8route/tuning/chain_trace.h) and its calibration kernels.

#include "fp8route/tuning/chain_trace.h"

#include <cuda_runtime.h>

#include <mutex>

#include "core/chain_trace.cuh"
#include "fp8route/tuning/cuda_check.h"
#include "core/griddep.cuh"
#include "core/launch.h"
#include "fp8route/error.h"

namespace fp8route::chain_trace {
namespace {

using kernels::TraceSlot;

struct Meta {
  std::string kernel;
  dim3 grid, block, cluster;
  size_t smem;
};

struct State {
  std::mutex mu;
  TraceSlot* slots = nullptr;  // device memory, never freed (graphs captured while armed point into it)
  int allocated = 0;
  int capacity = 0;
  bool armed = false;
  std::vector<Meta> meta;
};

State& state() {
  static State s;
  return s;
}

}  // namespace

bool compiled_in() {
#if defined(FP8ROUTE_CHAIN_TRACE) && FP8ROUTE_CHAIN_TRACE
  return true;
#else
  return false;
#endif
}

void arm(int capacity) {
  FP8ROUTE_CHECK(capacity >= 1 && capacity <= (1 << 20), "capacity: 1 .. 2^20 slots, got " << capacity);
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  if (capacity > s.allocated) {
    // The old block stays allocated: a graph captured under an earlier arm() may still replay.
    void* p = nullptr;
    FP8ROUTE_CUDA_CHECK(cudaMalloc(&p, sizeof(TraceSlot) * size_t(capacity)));
    s.slots = static_cast<TraceSlot*>(p);
    s.allocated = capacity;
  }
  FP8ROUTE_CUDA_CHECK(cudaMemset(s.slots, 0, sizeof(TraceSlot) * size_t(capacity)));
  FP8ROUTE_CUDA_CHECK(cudaDeviceSynchronize());
  s.capacity = capacity;
  s.meta.clear();
  s.armed = true;
}

void disarm() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  s.armed = false;
}

bool armed() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  return s.armed;
}

TraceSlot* next(const char* kernel, dim3 grid, dim3 block, size_t smem, dim3 cluster) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  if (!s.armed || static_cast<int>(s.meta.size()) >= s.capacity) return nullptr;
  s.meta.push_back(Meta{kernel, grid, block, cluster, smem});
  return s.slots + (s.meta.size() - 1);
}

void reset() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.meta.empty()) return;
  FP8ROUTE_CUDA_CHECK(cudaDeviceSynchronize());
  FP8ROUTE_CUDA_CHECK(cudaMemset(s.slots, 0, sizeof(TraceSlot) * s.meta.size()));
  FP8ROUTE_CUDA_CHECK(cudaDeviceSynchronize());
}

std::vector<Record> read() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  std::vector<TraceSlot> raw(s.meta.size());
  FP8ROUTE_CUDA_CHECK(cudaDeviceSynchronize());
  if (!raw.empty())
    FP8ROUTE_CUDA_CHECK(cudaMemcpy(raw.data(), s.slots, sizeof(TraceSlot) * raw.size(), cudaMemcpyDeviceToHost));
  std::vector<Record> out;
  out.reserve(raw.size());
  const auto first = [](unsigned long long inv) -> uint64_t { return inv ? ~inv : 0; };
  for (size_t i = 0; i < raw.size(); ++i) {
    const Meta& m = s.meta[i];
    const TraceSlot& t = raw[i];
    out.push_back(Record{m.kernel,
                         {m.grid.x, m.grid.y, m.grid.z},
                         {m.block.x, m.block.y, m.block.z},
                         {m.cluster.x, m.cluster.y, m.cluster.z},
                         m.smem,
                         first(t.start_first_inv),
                         t.start_last,
                         first(t.release_first_inv),
                         t.release_last,
                         first(t.exit_first_inv),
                         t.exit_last,
                         t.blocks});
  }
  return out;
}

namespace {

// Smallest nonzero step between consecutive reads of %globaltimer in one thread.
__global__ void globaltimer_tick_kernel(unsigned long long* out) {
  unsigned long long prev = kernels::globaltimer_ns(), tick = ~0ull;
  for (int i = 0; i < (1 << 16); ++i) {
    const unsigned long long t = kernels::globaltimer_ns();
    if (t != prev) {
      tick = t - prev < tick ? t - prev : tick;
      prev = t;
    }
  }
  *out = tick;
}

__global__ void empty_chain_kernel(int32_t* buf, int i, TraceSlot* slot) {
  kernels::trace_start(slot);
  kernels::griddep_launch_dependents();
  kernels::griddep_wait();
  kernels::trace_release(slot);
  if (blockIdx.x == 0 && threadIdx.x == 0) buf[i + 1] = buf[i] + 1;
  kernels::trace_exit(slot);
}

}  // namespace

int64_t globaltimer_tick_ns() {
  unsigned long long* d = nullptr;
  FP8ROUTE_CUDA_CHECK(cudaMalloc(&d, sizeof(*d)));
  globaltimer_tick_kernel<<<1, 1>>>(d);
  unsigned long long h = 0;
  const cudaError_t e = cudaMemcpy(&h, d, sizeof(h), cudaMemcpyDeviceToHost);
  cudaFree(d);
  FP8ROUTE_CUDA_CHECK(e);
  return h == ~0ull ? -1 : static_cast<int64_t>(h);
}

void empty_chain(int32_t* buf, int n, int blocks, bool pdl, cudaStream_t stream) {
  FP8ROUTE_CHECK(n >= 1 && blocks >= 1, "empty_chain: n and blocks >= 1, got " << n << ", " << blocks);
  const LaunchShape shape{dim3(static_cast<unsigned>(blocks)), dim3(128), 0, dim3(0, 0, 0), pdl};
  for (int i = 0; i < n; ++i)
    launch_kernel(empty_chain_kernel, shape, stream, buf, i,
                  next(pdl ? "empty_pdl" : "empty", shape.grid, shape.block, 0));
}

}  // namespace fp8route::chain_trace
