#pragma once
// The chain trace: a diagnostic of decode chains of PDL kernels (bench/decode_chain.py,
// docs/benchmarks.md "Decode chain trace"). Profilers time each kernel from outside and can change
// how PDL kernels overlap; the trace has the kernels stamp %globaltimer themselves at each block's
// start, griddepcontrol.wait release and exit (core/chain_trace.cuh), so a boundary's cost (a
// kernel's first wait release minus its predecessor's last block exit) is read from the device.
//
// A launcher asks next() for a slot each time it launches a traced kernel; while the trace is not
// armed it gets null and the kernel records nothing. Slots are handed out in launch order, so a
// CUDA graph captured while armed holds one slot per kernel node and every replay writes the same
// slots: reset(), replay, read(). The product kernels are traced only in a build with
// FP8ROUTE_CHAIN_TRACE (compiled_in()); the calibration chain (empty_chain) works in every build.
// Not for production: a traced kernel adds one block barrier and six atomics per block.

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace fp8route::kernels {
struct TraceSlot;
}

namespace fp8route::chain_trace {

// True in a build with FP8ROUTE_CHAIN_TRACE: the decode-chain kernels (decode and skinny GEMMs,
// RMSNorm and its fused quant, decode attention) take slots.
bool compiled_in();

// Starts handing out slots from 0 (at most `capacity` of them; launches past it are not traced).
// The slot memory is allocated on the current device on first use and never freed or moved while
// the process runs, so graphs captured while armed stay valid; call it outside any capture.
void arm(int capacity);
void disarm();
bool armed();

// A slot for the launch being made (null when not armed or full). Thread-safe.
kernels::TraceSlot* next(const char* kernel, dim3 grid, dim3 block, size_t smem, dim3 cluster = dim3(0, 0, 0));

// Zeroes every slot handed out since arm() (synchronous: the device is idle after it).
void reset();

struct Record {
  std::string kernel;
  unsigned grid[3], block[3], cluster[3];
  size_t smem;
  // ns of %globaltimer, 0 where no block recorded the event.
  uint64_t start_first, start_last, release_first, release_last, exit_first, exit_last;
  uint64_t blocks;  // blocks that recorded their exit
};

// The slots handed out since arm(), in launch order (synchronous).
std::vector<Record> read();

// The smallest step of %globaltimer one thread observes (ns): the resolution of every figure.
int64_t globaltimer_tick_ns();

// Calibration: n kernels of `blocks` blocks x 128 threads on `stream`, each with PDL (when `pdl`)
// triggering its dependents first, waiting, then reading buf[i] and writing buf[i + 1] = buf[i] + 1
// from block 0 (buf: int32 [n + 1] on the device); each takes a slot while armed. The
// release-latency floor of a chain of PDL kernels that do nothing else.
void empty_chain(int32_t* buf, int n, int blocks, bool pdl, cudaStream_t stream);

}  // namespace fp8route::chain_trace
