#pragma once
// Scratch buffers of the kernels that need one: the GEMM backends' stream-K and split-K partials and
// flags, cuBLASLt's workspace, aligned copies of scales, the dynamic per-tensor quant's amax slot and
// block counter.
//
// The rule: two launches that may run at the same time never share scratch, and a launch leaves
// nothing in it that a later one reads.
// - Eager calls: one buffer per (device, stream). Work on one stream runs in order, so its calls
//   take turns; calls on two streams get two buffers. cudaStreamPerThread is a different stream in
//   each thread, and is keyed by the stream it stands for.
// - Calls under CUDA graph capture: a buffer per capture sequence and capturing stream, owned by the
//   graph (a CUDA user object the graph retains with cudaGraphUserObjectMove). Two graphs never share
//   scratch, nor does a graph with eager calls (on the stream it was captured on or any other), so
//   graphs replayed at the same time on several streams cannot corrupt each other. Sharing within a
//   graph is safe: CUDA orders the launches of one cudaGraphExec, and a stream's captured launches
//   depend each on the one before. Not covered: two executables instantiated from one captured
//   graph (or its clones) launched so that they overlap, and captures whose dependencies are edited
//   by hand (cudaStreamUpdateCaptureDependencies) so that one stream's launches no longer follow
//   each other: instantiate a captured graph once, or order its launches. Nor a stream destroyed
//   with work still queued whose handle a new stream reuses at once (eager buffers are keyed by
//   handle): reuse streams, as frameworks' stream pools do.
// - Counters and flags (zero_new) are zeroed when a buffer is made, and every kernel that uses them
//   leaves them at zero when it finishes (its last block resets them). A launch that fails to start
//   never touched them; a kernel that faults leaves a sticky error that fails every later call in the
//   context. Either way no later call reads a stale count.
// Each graph's buffers are freed once the graph and its executables are destroyed and their
// launches have finished: the user object's destructor (which may not call CUDA) queues the pointer,
// and a later call outside capture frees it (cudaFree may wait for the device: once per batch of
// destroyed graphs, never on a call under capture). An eager buffer only grows; one it outgrows is kept (work
// queued on its stream may still use it, and freeing it here would synchronize), and growth at least
// doubles, so the kept ones total less than the live one.

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "fp8route/tuning/cuda_check.h"
#include "fp8route/error.h"

namespace fp8route {

namespace detail {

// Buffers of destroyed graphs, waiting to be freed: user-object destructors run on a CUDA thread and
// must not call CUDA. Never destroyed (a graph may outlive static destruction).
struct ReleasedScratch {
  std::mutex mu;
  std::vector<std::pair<int, void*>> buffers;  // (device, pointer)
};
inline ReleasedScratch& released_scratch() {
  static ReleasedScratch* r = new ReleasedScratch;
  return *r;
}
struct GraphScratch {
  int device;
  void* ptr;
};
inline void CUDART_CB release_graph_scratch(void* p) {
  auto* s = static_cast<GraphScratch*>(p);
  {
    ReleasedScratch& r = released_scratch();
    std::lock_guard<std::mutex> lock(r.mu);
    r.buffers.emplace_back(s->device, s->ptr);
  }
  delete s;
}

// Relaxed capture mode for this thread while in scope: allocating, freeing and graph-object calls are
// then legal while this thread's or another thread's stream is capturing. cudaMalloc and cudaFree are
// not stream operations and are not recorded in a graph (PyTorch's caching allocator allocates under
// capture the same way).
class RelaxedCaptureMode {
 public:
  RelaxedCaptureMode() { FP8ROUTE_CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&mode_)); }
  ~RelaxedCaptureMode() { (void)cudaThreadExchangeStreamCaptureMode(&mode_); }
  RelaxedCaptureMode(const RelaxedCaptureMode&) = delete;
  RelaxedCaptureMode& operator=(const RelaxedCaptureMode&) = delete;

 private:
  cudaStreamCaptureMode mode_ = cudaStreamCaptureModeRelaxed;
};

}  // namespace detail

class Workspaces {
 public:
  // what: the noun of the error message; zero_new: a new buffer is zero-filled before get()
  // returns (flags that the kernels leave at zero when they finish).
  explicit Workspaces(const char* what = "stream-K workspace", bool zero_new = false)
      : what_(what), zero_new_(zero_new) {}

  // At least `bytes` of scratch for work enqueued on `stream` (of `device`, the current device) by
  // this call: the stream's buffer, or under capture the buffer of the graph being captured.
  void* get(int device, size_t bytes, cudaStream_t stream, const std::string& who) {
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    unsigned long long capture = 0;
    cudaGraph_t graph = nullptr;
    cudaError_t e = cudaStreamGetCaptureInfo(stream, &status, &capture, &graph);
    if (e != cudaSuccess) (void)cudaGetLastError();  // not sticky: leave no error for the next call
    FP8ROUTE_CHECK_CAT(e == cudaSuccess, ErrorCategory::cuda_error,
                       who << ": cannot query the capture state of the stream: " << cudaGetErrorName(e) << " ("
                           << cudaGetErrorString(e) << ")");
    const Key key{device, reinterpret_cast<uintptr_t>(stream), per_thread_stream_id(stream, who)};
    std::lock_guard<std::mutex> lock(mu_);
    if (status == cudaStreamCaptureStatusActive) return captured(key, bytes, capture, graph, who);
    if (status == cudaStreamCaptureStatusNone) free_released(device);
    Buffer& b = live_[key];
    if (bytes <= b.bytes) return b.ptr;
    const size_t size = round_up(std::max(bytes, 2 * b.bytes), kGranule);
    void* ptr = nullptr;
    {
      detail::RelaxedCaptureMode relaxed;
      ptr = allocate(device, size, who);
    }
    if (b.ptr) kept_.push_back(b.ptr);
    b = {ptr, size};
    return ptr;
  }

 private:
  struct Buffer {
    void* ptr = nullptr;
    size_t bytes = 0;
  };
  struct GraphBuffer {
    unsigned long long capture = 0;  // the capture sequence (ids are unique in the process)
    void* ptr = nullptr;
    size_t bytes = 0;
  };
  // (device, stream handle, id of the stream cudaStreamPerThread stands for, else 0)
  using Key = std::tuple<int, uintptr_t, unsigned long long>;
  static constexpr size_t kGranule = size_t{1} << 20;
  static constexpr size_t kGraphGranule = 256;  // a graph's buffers are many and mostly small

  static size_t round_up(size_t v, size_t g) { return (v + g - 1) / g * g; }

  static unsigned long long per_thread_stream_id(cudaStream_t stream, const std::string& who) {
    if (stream != cudaStreamPerThread) return 0;
    unsigned long long id = 0;
    const cudaError_t e = cudaStreamGetId(stream, &id);
    if (e != cudaSuccess) (void)cudaGetLastError();
    FP8ROUTE_CHECK_CAT(e == cudaSuccess, ErrorCategory::cuda_error,
                       who << ": cannot identify cudaStreamPerThread: " << cudaGetErrorName(e));
    return id;
  }

  // The buffer of this capture sequence on this stream; a new one (owned by the graph) on its first
  // use or when a later launch in the same capture needs more.
  void* captured(const Key& key, size_t bytes, unsigned long long capture, cudaGraph_t graph,
                 const std::string& who) {
    GraphBuffer& b = graph_live_[key];  // an entry of an earlier capture on this stream is stale
    if (b.capture == capture && bytes <= b.bytes) return b.ptr;
    const size_t size = round_up(b.capture == capture ? std::max(bytes, 2 * b.bytes) : bytes, kGraphGranule);
    const int device = std::get<0>(key);
    detail::RelaxedCaptureMode relaxed;
    void* ptr = allocate(device, size, who);
    auto* owned = new detail::GraphScratch{device, ptr};
    cudaUserObject_t object = nullptr;
    cudaError_t e = cudaUserObjectCreate(&object, owned, &detail::release_graph_scratch, 1,
                                         cudaUserObjectNoDestructorSync);
    if (e != cudaSuccess) {
      delete owned;
      std::lock_guard<std::mutex> lock(detail::released_scratch().mu);
      detail::released_scratch().buffers.emplace_back(device, ptr);
    } else {
      e = cudaGraphRetainUserObject(graph, object, 1, cudaGraphUserObjectMove);
      if (e != cudaSuccess) (void)cudaUserObjectRelease(object);  // its destructor queues the buffer
    }
    if (e != cudaSuccess) (void)cudaGetLastError();
    FP8ROUTE_CHECK_CAT(e == cudaSuccess, ErrorCategory::cuda_error,
                       who << ": cannot hand a " << size << "-byte " << what_ << " to the graph being captured: "
                           << cudaGetErrorName(e) << " (" << cudaGetErrorString(e) << ")");
    b = {capture, ptr, size};
    return ptr;
  }

  // cudaMalloc (zero-filled when zero_new_); the caller holds mu_ and relaxed capture mode.
  void* allocate(int device, size_t size, const std::string& who) {
    void* ptr = nullptr;
    cudaError_t e = cudaMalloc(&ptr, size);
    const char* step = "allocate";
    if (e == cudaSuccess && zero_new_) {
      // On a private stream the host waits for: on the caller's stream under capture the fill would
      // only be recorded, and a call outside the graph would find the buffer not zeroed.
      cudaStream_t& z = zero_streams_[device];
      step = "zero";
      if (z == nullptr) e = cudaStreamCreateWithFlags(&z, cudaStreamNonBlocking);
      if (e == cudaSuccess) e = cudaMemsetAsync(ptr, 0, size, z);
      if (e == cudaSuccess) e = cudaStreamSynchronize(z);
      if (e != cudaSuccess) cudaFree(ptr), ptr = nullptr;
    }
    if (e != cudaSuccess) (void)cudaGetLastError();  // not sticky: leave no error for the next call
    FP8ROUTE_CHECK_CAT(e == cudaSuccess, ErrorCategory::cuda_error,
                       who << ": cannot " << step << " a " << size << "-byte " << what_ << " on device " << device
                           << ": " << cudaGetErrorName(e) << " (" << cudaGetErrorString(e) << ")");
    return ptr;
  }

  // Frees the buffers of destroyed graphs on `device` (their launches have finished: CUDA defers the
  // release of a graph's user objects until then). Outside capture on this thread only; one that
  // cannot be freed now waits for the next call.
  static void free_released(int device) {
    detail::ReleasedScratch& r = detail::released_scratch();
    std::vector<void*> mine;
    {
      std::lock_guard<std::mutex> lock(r.mu);
      if (r.buffers.empty()) return;
      auto keep = std::stable_partition(r.buffers.begin(), r.buffers.end(),
                                        [&](const auto& b) { return b.first != device; });
      for (auto it = keep; it != r.buffers.end(); ++it) mine.push_back(it->second);
      r.buffers.erase(keep, r.buffers.end());
    }
    if (mine.empty()) return;
    detail::RelaxedCaptureMode relaxed;
    std::vector<void*> failed;
    for (void* p : mine)
      if (cudaFree(p) != cudaSuccess) failed.push_back(p), (void)cudaGetLastError();
    if (failed.empty()) return;
    std::lock_guard<std::mutex> lock(r.mu);
    for (void* p : failed) r.buffers.emplace_back(device, p);
  }

  const char* what_;
  bool zero_new_;
  std::mutex mu_;
  std::map<Key, Buffer> live_;
  std::vector<void*> kept_;
  std::map<Key, GraphBuffer> graph_live_;
  std::map<int, cudaStream_t> zero_streams_;  // per device, for the zero fill; never destroyed
};

}  // namespace fp8route
