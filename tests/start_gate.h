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
      if (!cv_.wait_for(lock, std::chrono::seconds(20), [this] { return open_; })) by_watchdog_ = true;
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
  // True when the watchdog, not open(), released the held work: the host blocked while enqueueing
  // it (more held operations than the driver queues; about 110 over two streams on an H200).
  bool opened_by_watchdog() {
    std::lock_guard<std::mutex> lock(mu_);
    return by_watchdog_;
  }
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
  bool open_ = false, by_watchdog_ = false;
  std::thread watchdog_;
};

}  // namespace fp8route::test
