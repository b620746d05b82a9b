#pragma once
// Per-(device, stream) scratch buffers of the GEMM backends that need one (stream-K and split-K
// partials and their flags). Internal to src/gemm.

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

namespace fp8route::gemm {

// One buffer per (device, stream): GEMMs of two streams overlap on the GPU and would race on a
// shared one (cuBLASLt's workspace is kept the same way). It only grows, and a buffer it outgrows
// is kept, not freed: a CUDA graph captured earlier still points at it. Growth at least doubles, so
// the kept buffers total less than the live one. A first call (or a larger problem) under CUDA graph
// capture allocates too.
class Workspaces {
 public:
  // what: the noun of the error message; zero_new: a new buffer is zero-filled on the stream
  // before first use (flags that the kernels leave at zero when they finish).
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
    // allocator allocates under capture the same way. Under capture the zero fill below is recorded
    // instead of run, and then runs before every replay's kernels: still zero at first use.
    cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    FP8ROUTE_CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
    const cudaError_t e = cudaMalloc(&ptr, size);
    FP8ROUTE_CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
    FP8ROUTE_CUDA_CHECK(e);
    if (zero_new_) FP8ROUTE_CUDA_CHECK(cudaMemsetAsync(ptr, 0, size, stream));
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
};

}  // namespace fp8route::gemm
