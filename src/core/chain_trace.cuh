#pragma once
// Device side of the chain trace (host side and what it is for: fp8route/tuning/chain_trace.h). A traced kernel
// records %globaltimer at three moments of each thread block: its start, the release of its
// griddepcontrol.wait, and its exit; a launch's slot keeps the first and the last of each over its
// blocks. Every field is a 64-bit atomicMax (a first time is kept as its complement), so a slot is
// reset by zeroing it.
//
// Product kernels carry the hooks only when built with FP8ROUTE_CHAIN_TRACE (CMake option, off by
// default): FP8ROUTE_TRACE_FIELD adds the slot pointer to a kernel's parameters and
// FP8ROUTE_TRACE(...) / FP8ROUTE_TRACE_SCOPE(slot) compile to nothing without it. The helpers
// themselves are always defined (the calibration kernels of chain_trace.cu use them in every build).

#include <cstdint>

namespace fp8route::kernels {

struct TraceSlot {
  unsigned long long start_first_inv, start_last;      // first time as ~t (atomicMax of ~t = min of t)
  unsigned long long release_first_inv, release_last;
  unsigned long long exit_first_inv, exit_last;
  unsigned long long blocks;  // blocks that recorded their exit (a check that every block traced)
  unsigned long long pad;
};
static_assert(sizeof(TraceSlot) == 64, "one slot is 64 bytes (the host reads them as an array)");

__device__ __forceinline__ unsigned long long globaltimer_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)::"memory");
  return t;
}

__device__ __forceinline__ void trace_mark(unsigned long long* first_inv, unsigned long long* last) {
  const unsigned long long t = globaltimer_ns();
  atomicMax(first_inv, ~t);
  atomicMax(last, t);
}

// By thread 0 of a block: one pair of atomics per block and event.
__device__ __forceinline__ void trace_start(TraceSlot* s) {
  if (s && threadIdx.x == 0 && threadIdx.y == 0) trace_mark(&s->start_first_inv, &s->start_last);
}
// Right after thread 0's griddepcontrol.wait (the wait releases the whole grid at once).
__device__ __forceinline__ void trace_release(TraceSlot* s) {
  if (s && threadIdx.x == 0 && threadIdx.y == 0) trace_mark(&s->release_first_inv, &s->release_last);
}
// At the block's end, after every thread's last store: a block barrier, so it must be reached by
// all threads of the block (every return of a traced kernel is block-uniform).
__device__ __forceinline__ void trace_exit(TraceSlot* s) {
  if (!s) return;
  __syncthreads();
  if (threadIdx.x == 0 && threadIdx.y == 0) {
    trace_mark(&s->exit_first_inv, &s->exit_last);
    atomicAdd(&s->blocks, 1ull);
  }
}

// Records the start at construction and the exit at every return of the scope's function.
struct TraceScope {
  TraceSlot* s;
  __device__ __forceinline__ explicit TraceScope(TraceSlot* slot) : s(slot) { trace_start(s); }
  __device__ __forceinline__ ~TraceScope() { trace_exit(s); }
  TraceScope(const TraceScope&) = delete;
  TraceScope& operator=(const TraceScope&) = delete;
};

}  // namespace fp8route::kernels

#if defined(FP8ROUTE_CHAIN_TRACE) && FP8ROUTE_CHAIN_TRACE
#define FP8ROUTE_TRACE_FIELD ::fp8route::kernels::TraceSlot* trace = nullptr;
#define FP8ROUTE_TRACE(...) __VA_ARGS__
#define FP8ROUTE_TRACE_SCOPE(slot) const ::fp8route::kernels::TraceScope fp8route_trace_scope_(slot)
#else
#define FP8ROUTE_TRACE_FIELD
#define FP8ROUTE_TRACE(...)
#define FP8ROUTE_TRACE_SCOPE(slot)
#endif
