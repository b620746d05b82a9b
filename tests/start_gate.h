#pragma once
// A start gate for work on several streams, so that the GPU runs it at the same time: each held
// stream waits on an event recorded after a host function that blocks until open(). Work enqueued
// on the held streams before open() is then released at once (graph replays meant to overlap,
// instead of each finishing before the host has launched the next).

#include <cuda_runtime_api.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

namespace fp8route::test {

class StartGate {
 public:
  StartGate() {
    ok_ = cudaStreamCreateWithFlags(&gate_, cudaStreamNonBlocking) == cudaSuccess &&
          cudaEventCreateWithFlags(&event_, cudaEventDisableTiming) == cudaSuccess &&
          cudaLaunchHostFunc(gate_, &wait_open, this) == cudaSuccess && cudaEventRecord(event_, gate_) == cudaSuccess;
    // Opens by itself after a while: a host that blocks while enqueueing (a full launch queue)
    // must not wait for the gate forever.
    watchdog_ = std::thread([this] {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_for(lock, std::chrono::seconds(20), [this] { return open_; });
      open_ = true;
      cv_.notify_all();
    });
  }
  ~StartGate() {
    open();
    watchdog_.join();
    if (gate_) (void)cudaStreamSynchronize(gate_), (void)cudaStreamDestroy(gate_);
    if (event_) (void)cudaEventDestroy(event_);
  }
  StartGate(const StartGate&) = delete;
  StartGate& operator=(const StartGate&) = delete;

  bool ok() const { return ok_; }
  // Work enqueued on `s` after this call waits for open().
  bool hold(cudaStream_t s) { return cudaStreamWaitEvent(s, event_, 0) == cudaSuccess; }
  void open() {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = true;
    cv_.notify_all();
  }

 private:
  // Runs on CUDA's host-function thread; makes no CUDA call.
  static void CUDART_CB wait_open(void* p) {
    auto* g = static_cast<StartGate*>(p);
    std::unique_lock<std::mutex> lock(g->mu_);
    g->cv_.wait(lock, [g] { return g->open_; });
  }

  cudaStream_t gate_ = nullptr;
  cudaEvent_t event_ = nullptr;
  bool ok_ = false;
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false;
  std::thread watchdog_;
};

}  // namespace fp8route::test
