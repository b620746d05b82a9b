#pragma once
// A start gate for work on several streams, so that the GPU runs it at the same time: each held
// stream waits on an event recorded after the gate stream's wait for a flag in mapped host memory
// (cuStreamWaitValue32, a wait the GPU's front end performs), which open() sets. Work enqueued on
// the held streams before open() is then released at once (graph replays meant to overlap, instead
// of each finishing before the host has launched the next). Where stream memory operations are
// unavailable, the gate stream runs a host function that blocks until open() instead. Launching one
// graph exec again while its earlier launch is held can block the host, which would then never open
// the gate: held replays use an exec each, and a watchdog opens the gate after 20 s regardless
// (opened_by_watchdog() says so).

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>

namespace fp8route::test {

class StartGate {
 public:
  StartGate() {
    ok_ = cudaStreamCreateWithFlags(&gate_, cudaStreamNonBlocking) == cudaSuccess &&
          cudaEventCreateWithFlags(&event_, cudaEventDisableTiming) == cudaSuccess;
    if (ok_ && !device_wait()) ok_ = cudaLaunchHostFunc(gate_, &wait_open, this) == cudaSuccess;
    ok_ = ok_ && cudaEventRecord(event_, gate_) == cudaSuccess;
    // A host that blocks while it enqueues held work would wait for the gate forever.
    watchdog_ = std::thread([this] {
      std::unique_lock<std::mutex> lock(mu_);
      if (!cv_.wait_for(lock, std::chrono::seconds(20), [this] { return open_; })) by_watchdog_ = true;
      lock.unlock();
      open();
    });
  }
  ~StartGate() {
    open();
    if (watchdog_.joinable()) watchdog_.join();
    if (gate_) (void)cudaStreamSynchronize(gate_), (void)cudaStreamDestroy(gate_);
    if (event_) (void)cudaEventDestroy(event_);
    if (flag_) (void)cudaFreeHost(const_cast<uint32_t*>(flag_));
  }
  StartGate(const StartGate&) = delete;
  StartGate& operator=(const StartGate&) = delete;

  bool ok() const { return ok_; }
  // Work enqueued on `s` after this call waits for open().
  bool hold(cudaStream_t s) { return cudaStreamWaitEvent(s, event_, 0) == cudaSuccess; }
  void open() {
    if (flag_) {
      std::atomic_thread_fence(std::memory_order_seq_cst);
      *flag_ = 1;
    }
    std::lock_guard<std::mutex> lock(mu_);
    open_ = true;
    cv_.notify_all();
  }
  bool opened_by_watchdog() {
    std::lock_guard<std::mutex> lock(mu_);
    return by_watchdog_;
  }

 private:
  // The gate stream waits until *flag_ >= 1; false when stream memory operations are unavailable.
  bool device_wait() {
    using WaitValue = CUresult (*)(CUstream, CUdeviceptr, cuuint32_t, unsigned);
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion("cuStreamWaitValue32", &fn, 12000, cudaEnableDefault, &found) !=
            cudaSuccess ||
        found != cudaDriverEntryPointSuccess || fn == nullptr)
      return false;
    void* host = nullptr;
    void* dev = nullptr;
    if (cudaHostAlloc(&host, 4, cudaHostAllocMapped) != cudaSuccess) return false;
    flag_ = static_cast<volatile uint32_t*>(host);
    *flag_ = 0;
    return cudaHostGetDevicePointer(&dev, host, 0) == cudaSuccess &&
           reinterpret_cast<WaitValue>(fn)(gate_, reinterpret_cast<CUdeviceptr>(dev), 1, CU_STREAM_WAIT_VALUE_GEQ) ==
               CUDA_SUCCESS;
  }
  // Runs on CUDA's host-function thread; makes no CUDA call.
  static void CUDART_CB wait_open(void* p) {
    auto* g = static_cast<StartGate*>(p);
    std::unique_lock<std::mutex> lock(g->mu_);
    g->cv_.wait(lock, [g] { return g->open_; });
  }

  cudaStream_t gate_ = nullptr;
  cudaEvent_t event_ = nullptr;
  volatile uint32_t* flag_ = nullptr;
  bool ok_ = false;
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false, by_watchdog_ = false;
  std::thread watchdog_;
};

}  // namespace fp8route::test
