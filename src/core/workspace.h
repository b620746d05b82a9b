#pragma once
// Per-(device, stream) scratch buffers of the kernels that need one: the GEMM backends' stream-K
// and split-K partials and flags, the dynamic per-tensor quant's amax slot and block counter.

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "core/cuda_check.h"
#include "fp8route/error.h"

namespace fp8route {

// One buffer per (device, stream): GEMMs of two streams overlap on the GPU and would race on a
// shared one (cuBLASLt's workspace is kept the same way). It only grows, and a buffer it outgrows
// is kept, not freed: a CUDA graph captured earlier still points at it. Growth at least doubles, so
// the kept buffers total less than the live one. A first call (or a larger problem) under CUDA graph
// capture allocates too.
class Workspaces {
 public:
  // what: the noun of the error message; zero_new: a new buffer is zero-filled before get()
  // returns (flags that the kernels leave at zero when they finish).
  explicit Workspaces(const char* what = "stream-K workspace", bool zero_new = false)
      : what_(what), zero_new_(zero_new) {}

  void* get(int device, size_t bytes, cudaStream_t stream, const std::string& who) {
    std::lock_guard<std::mutex> lock(mu_);
    Buffer& b = live_[{device, reinterpret_cast<uintptr_t>(stream)}];
    if (bytes <= b.bytes) return b.ptr;
    constexpr size_t kGranule = size_t{1} << 20;
    const size_t size = (std::max(bytes, 2 * b.bytes) + kGranule - 1) / kGranule * kGranule;
    void* ptr = nullptr;
    // Relaxed capture mode for this thread, so that the allocation is legal while this stream (or
    // another thread's) is capturing: cudaMalloc is not a stream operation and is not recorded in
    // the graph; the buffer outlives every graph that uses it (it is never freed). PyTorch's caching
    // allocator allocates under capture the same way. The zero fill runs now, on a private stream
    // the host waits for: on `stream` under capture it would only be recorded, and a later call
    // outside the graph would find the buffer not zeroed.
    cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    FP8ROUTE_CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
    cudaError_t e = cudaMalloc(&ptr, size);
    const char* step = "allocate";
    if (e == cudaSuccess && zero_new_) {
      cudaStream_t& z = zero_streams_[device];
      step = "zero";
      if (z == nullptr) e = cudaStreamCreateWithFlags(&z, cudaStreamNonBlocking);
      if (e == cudaSuccess) e = cudaMemsetAsync(ptr, 0, size, z);
      if (e == cudaSuccess) e = cudaStreamSynchronize(z);
      if (e != cudaSuccess) cudaFree(ptr), ptr = nullptr;
    }
    FP8ROUTE_CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
    if (e != cudaSuccess) (void)cudaGetLastError();  // not sticky: leave no error for the next call
    FP8ROUTE_CHECK_CAT(e == cudaSuccess, ErrorCategory::cuda_error,
                       who << ": cannot " << step << " a " << size << "-byte " << what_ << " on device " << device
                           << ": " << cudaGetErrorName(e) << " (" << cudaGetErrorString(e) << ")");
    if (b.ptr) kept_.push_back(b.ptr);
    b = {ptr, size};
    return ptr;
  }

 private:
  struct Buffer {
    void* ptr = nullptr;
    size_t bytes = 0;
  };
  const char* what_;
  bool zero_new_;
  std::mutex mu_;
  std::map<std::pair<int, uintptr_t>, Buffer> live_;
  std::vector<void*> kept_;
  std::map<int, cudaStream_t> zero_streams_;  // per device, for the zero fill; never destroyed
};

}  // namespace fp8route
