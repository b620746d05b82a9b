#include "fp8route/tuning/measure.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <numeric>
#include <random>
#include <cmath>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "fp8route/tuning/cuda_check.h"
#include "fp8route/device.h"
#include "fp8route/error.h"

namespace fp8route::timing {

namespace {

// Reads n16 16-byte units, so that the L2 then holds only clean lines of this buffer. Stored only
// when the folded value is one no data makes likely, so the loads stay.
__global__ void l2_flush_kernel(const uint4* p, int64_t n16, unsigned* sink) {
  unsigned x = 0;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n16; i += int64_t(gridDim.x) * blockDim.x) {
    const uint4 v = p[i];
    x ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (x == 0x9E3779B9u) *sink = x;
}

// Untimed, before every timed replay of measure_interleaved: the previous op's dirty lines (its
// output, a split-K workspace) are written back here, not during the next op's timing.
void flush_l2(cudaStream_t stream) {
  static const int64_t bytes = 2 * static_cast<int64_t>(device_info(-1).l2_bytes) / 16 * 16;
  static void* buf = [] {
    void* p = nullptr;
    FP8ROUTE_CUDA_CHECK(cudaMalloc(&p, bytes + 16));
    FP8ROUTE_CUDA_CHECK(cudaMemset(p, 0, bytes + 16));
    return p;
  }();
  l2_flush_kernel<<<2 * device_info(-1).sm_count, 1024, 0, stream>>>(
      static_cast<const uint4*>(buf), bytes / 16, reinterpret_cast<unsigned*>(static_cast<char*>(buf) + bytes));
  FP8ROUTE_CUDA_CHECK(cudaGetLastError());
}

// The fastest time among the choices that did not fail (INFINITY when all failed).
double fastest_ok(const std::vector<double>& us, const std::vector<bool>& failed) {
  double best = INFINITY;
  for (size_t i = 0; i < us.size(); ++i)
    if (!failed[i]) best = std::min(best, us[i]);
  return best;
}

// The stream every measurement of this thread runs on (libraries keep per-stream state, cuBLASLt's
// workspace, which a fresh stream per measurement would multiply); replaced after a stall, when the
// old one still holds work that may never finish (it is leaked, never synchronized or destroyed).
thread_local cudaStream_t t_stream = nullptr;

cudaStream_t timing_stream() {
  if (t_stream == nullptr) FP8ROUTE_CUDA_CHECK(cudaStreamCreateWithFlags(&t_stream, cudaStreamNonBlocking));
  return t_stream;
}

std::string seconds_text(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f s", s);
  return buf;
}

// Polls query() (cudaStreamQuery or cudaEventQuery) until it reports done or `seconds` pass.
template <class Query>
bool polled_within(Query query, double seconds) {
  using clock = std::chrono::steady_clock;
  const auto deadline = clock::now() + std::chrono::duration<double>(seconds);
  auto nap = std::chrono::microseconds(10);
  for (;;) {
    const cudaError_t e = query();
    if (e == cudaSuccess) return true;
    if (e != cudaErrorNotReady) FP8ROUTE_CUDA_CHECK(e);
    if (cudaPeekAtLastError() == cudaErrorNotReady) (void)cudaGetLastError();  // "not yet" is no error
    if (clock::now() > deadline) return false;
    std::this_thread::sleep_for(nap);
    nap = std::min(nap * 2, std::chrono::microseconds(1000));
  }
}

}  // namespace

bool finished_within(cudaStream_t stream, double seconds) {
  return polled_within([&] { return cudaStreamQuery(stream); }, seconds);
}

bool finished_within(cudaEvent_t event, double seconds) {
  return polled_within([&] { return cudaEventQuery(event); }, seconds);
}

int rotation_sets(int64_t bytes_per_call, const MeasureOptions& opt) {
  const double l2 = static_cast<double>(device_info(-1).l2_bytes);
  const double want = std::ceil(opt.l2_multiple * l2 / std::max<double>(1.0, static_cast<double>(bytes_per_call)));
  return static_cast<int>(std::clamp<double>(want, 3, opt.max_sets));
}

std::vector<Measurement> measure_interleaved(const std::vector<Enqueue>& ops, int sets, const MeasureOptions& opt) {
  if (opt.graph && opt.instances > 1) {
    // Every op repeated: each copy is captured into a graph of its own and replayed interleaved
    // with all the others; then the copies' medians are averaged (the expected time of one graph
    // instance, when instances of one op differ).
    std::vector<Enqueue> copies;
    for (const Enqueue& op : ops) copies.insert(copies.end(), static_cast<size_t>(opt.instances), op);
    MeasureOptions one = opt;
    one.instances = 1;
    const std::vector<Measurement> each = measure_interleaved(copies, sets, one);
    std::vector<Measurement> out(ops.size());
    for (size_t o = 0; o < ops.size(); ++o) {
      Measurement& m = out[o];
      m.min_us = INFINITY;
      for (int i = 0; i < opt.instances; ++i) {
        const Measurement& x = each[o * opt.instances + i];
        if (!x.error.empty()) {
          m.error = x.error;
          m.stalled = x.stalled;
          break;
        }
        m.median_us += x.median_us / opt.instances;
        m.min_us = std::min(m.min_us, x.min_us), m.max_us = std::max(m.max_us, x.max_us);
        m.sets = x.sets, m.reps = x.reps, m.graph = x.graph;
      }
      if (!m.error.empty()) {
        const std::string error = m.error;
        const bool stalled = m.stalled;
        m = Measurement{};
        m.error = error, m.stalled = stalled;
      }
      m.instances = opt.instances;
    }
    return out;
  }
  const cudaStream_t stream = timing_stream();
  const size_t n = ops.size();
  std::vector<Measurement> out(n);
  std::vector<cudaGraphExec_t> exec(n, nullptr);
  std::vector<bool> live(n, false);
  // A stall leaves the stream holding work that may never finish: the rest is not run on it, and
  // the next measurement of this thread gets a new stream.
  const auto give_up_stream = [&](const std::string& why) {
    for (size_t o = 0; o < n; ++o)  // none is timed, those set up before the stall included
      if (out[o].error.empty()) out[o].error = why;
    for (cudaGraphExec_t e : exec)
      if (e) cudaGraphExecDestroy(e);  // an executable in flight is freed when it completes
    t_stream = nullptr;
    return out;
  };
  double first_calls_s = 0;  // host-to-finish time of every op's first calls, for the replays' bound
  for (size_t o = 0; o < n; ++o) {
    try {
      for (int i = 0; i < sets; ++i) ops[o](i, stream);  // first calls outside the graph: lazy init
      const auto t0 = std::chrono::steady_clock::now();
      if (!finished_within(stream, opt.timeout_s)) {
        out[o].stalled = true;
        out[o].error = "did not finish within " + seconds_text(opt.timeout_s) +
                       " (a kernel that never returns, or the GPU held by other work); not timed";
        return give_up_stream("not timed: another op of the measurement did not finish");
      }
      first_calls_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (opt.graph) {
        cudaGraph_t graph = nullptr;
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
  // The rounds (one replay of every op, warm-ups first) are enqueued back to back, so the GPU never
  // waits for the host between them; at most two are in the queue: before round r is enqueued,
  // round r - 2 must have finished within a bound, else a stuck op would fill the stream's launch
  // queue and block the host in an enqueue. The bound is that of the op's first calls plus 4x what
  // they took, per round, and the wait spans two rounds.
  const double round_bound = opt.timeout_s + 4.0 * first_calls_s;
  const int rounds = opt.warmup + opt.reps;
  std::vector<cudaEvent_t> ev(2 * opt.reps * n), round_end(rounds);
  for (auto& e : ev) FP8ROUTE_CUDA_CHECK(cudaEventCreate(&e));
  for (auto& e : round_end) FP8ROUTE_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  const auto stalled = [&] {
    for (size_t o = 0; o < n; ++o)
      if (live[o]) out[o].stalled = true;
    for (auto& e : ev) cudaEventDestroy(e);
    for (auto& e : round_end) cudaEventDestroy(e);
    return give_up_stream("timed replays did not finish within " + seconds_text(2 * round_bound) +
                          " a round (a kernel that never returns, or the GPU held by other work); not timed");
  };
  const auto end_round = [&](int r) {
    FP8ROUTE_CUDA_CHECK(cudaEventRecord(round_end[r], stream));
    return r < 2 || finished_within(round_end[r - 2], 2 * round_bound);
  };
  for (int w = 0; w < opt.warmup; ++w) {
    for (size_t o = 0; o < n; ++o)
      if (live[o]) run_once(o);
    if (!end_round(w)) return stalled();
  }
  // Rounds: replay r of every op before replay r + 1 of any, so that a drift of the clocks during
  // the run (the H200 moves by ~10% within seconds under sustained load) shifts every op alike. The
  // order within a round is shuffled and the L2 flushed (untimed) before each replay, so no op
  // always follows the same neighbour and pays for its dirty lines (after a split-K config that
  // writes a workspace, the next op runs measurably slower).
  std::mt19937 rng(12345);
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t{0});
  for (int r = 0; r < opt.reps; ++r) {
    if (n > 1) std::shuffle(order.begin(), order.end(), rng);
    for (size_t o : order) {
      if (!live[o]) continue;
      if (opt.flush_l2) flush_l2(stream);
      FP8ROUTE_CUDA_CHECK(cudaEventRecord(ev[2 * (r * n + o)], stream));
      run_once(o);
      FP8ROUTE_CUDA_CHECK(cudaEventRecord(ev[2 * (r * n + o) + 1], stream));
    }
    if (!end_round(opt.warmup + r)) return stalled();
  }
  if (!finished_within(stream, 2 * round_bound)) return stalled();
  for (auto& e : round_end) cudaEventDestroy(e);
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

std::vector<bool> screen_keep(const std::vector<std::string>& backends, const std::vector<double>& us,
                              const std::vector<bool>& failed, double pct) {
  const size_t n = backends.size();
  FP8ROUTE_CHECK(us.size() == n && failed.size() == n, "screen_keep: " << n << " backends, " << us.size()
                                                                       << " times, " << failed.size() << " flags");
  const double best = fastest_ok(us, failed);
  std::map<std::string, size_t> fastest;  // backend -> index of its fastest choice
  for (size_t i = 0; i < n; ++i)
    if (!failed[i] && !backends[i].empty() && (!fastest.count(backends[i]) || us[i] < us[fastest[backends[i]]]))
      fastest[backends[i]] = i;
  std::vector<bool> keep(n);
  for (size_t i = 0; i < n; ++i)
    keep[i] = backends[i].empty() || failed[i] || us[i] <= best * (1 + pct / 100) || fastest.at(backends[i]) == i;
  return keep;
}

std::vector<size_t> final_round(const std::vector<double>& us, const std::vector<bool>& failed, double pct) {
  FP8ROUTE_CHECK(us.size() == failed.size(), "final_round: " << us.size() << " times, " << failed.size() << " flags");
  const double best = fastest_ok(us, failed);
  std::vector<size_t> out;
  for (size_t i = 0; i < us.size(); ++i)
    if (!failed[i] && us[i] <= best * (1 + pct / 100)) out.push_back(i);
  std::stable_sort(out.begin(), out.end(), [&](size_t a, size_t b) { return us[a] < us[b]; });
  if (out.size() < 2) out.clear();
  return out;
}

Measurement measure(const Enqueue& enqueue, int sets, const MeasureOptions& opt) {
  Measurement m = measure_interleaved({enqueue}, sets, opt)[0];
  FP8ROUTE_CHECK_CAT(m.error.empty(), ErrorCategory::cuda_error, m.error);
  return m;
}

}  // namespace fp8route::timing
