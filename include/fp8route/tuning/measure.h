#pragma once
// The one benchmark method of fp8route (docs/benchmarks.md), shared by every benchmark:
// the op is enqueued once per rotation set inside a CUDA graph (launch gaps hidden, as in a
// serving engine), the sets together span >= 3x the L2 so inputs come from HBM (up to a cap on
// the number of sets, see below), >= 5 warm-up replays, then the median of >= 20 timed replays.

#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace fp8route::timing {

struct MeasureOptions {
  int warmup = 5;          // untimed graph replays
  int reps = 20;           // timed graph replays; the median is reported
  double l2_multiple = 3;  // rotation sets span this many L2 sizes ...
  int max_sets = 512;      // ... but at most this many sets: below ~350 KB per call the inputs
                           // then partly come from L2 (as activations written by the previous
                           // layer do in a real model)
  bool graph = true;       // false: time plain launches (for ops that cannot be captured)
  bool flush_l2 = true;    // read 2x L2 of another buffer (untimed) before each timed replay
  int instances = 1;       // > 1: each op captured into this many graphs, all replayed interleaved;
                           // the op's time is the mean of their medians (a stream-K graph runs at
                           // one of two speeds for its life: docs/routing.md, "Near-ties")
  // Nothing here waits for the GPU without a bound: an op's first calls must finish within
  // timeout_s of being enqueued, and each round of replays (enqueued back to back, at most two in
  // flight) within twice timeout_s plus 4x what the first calls took. An op that misses its bound
  // gets Measurement::stalled and an error; the thread's timing stream (which still holds the stuck
  // work) is then given up for a new one, and no op of the measurement counts as timed.
  double timeout_s = 10;
};

struct Measurement {
  double median_us = 0, min_us = 0, max_us = 0;  // per call
  int sets = 0, reps = 0, instances = 1;
  bool graph = true;
  std::string error;  // measure_interleaved: why this op could not be run (then not timed)
  bool stalled = false;  // it did not finish within MeasureOptions::timeout_s (error says so)
};

using Enqueue = std::function<void(int set, cudaStream_t)>;

// Whether `stream`'s work (or the work before `event`) finishes within `seconds` (polled, never a
// blocking synchronize).
bool finished_within(cudaStream_t stream, double seconds);
bool finished_within(cudaEvent_t event, double seconds);

// How many rotation sets a call touching `bytes_per_call` bytes of input needs.
int rotation_sets(int64_t bytes_per_call, const MeasureOptions& opt = {});

// Times enqueue(set, stream) for set = 0..sets-1, per the method above.
// Throws what the op throws.
Measurement measure(const Enqueue& enqueue, int sets, const MeasureOptions& opt = {});

// Several ops timed side by side: each captured once, then warm-ups and timed replays in round
// robin (replay r of every op before replay r + 1 of any), so clock drift during the run shifts
// every op alike and their ratios hold. An op that throws while being set up gets its error in
// Measurement::error and is not timed.
std::vector<Measurement> measure_interleaved(const std::vector<Enqueue>& ops, int sets,
                                             const MeasureOptions& opt = {});

// Which choices a screen keeps (gemm_operands.h, screen_gemms), from the quick round's medians:
// every choice of an empty backend (the routed entry point), every one that failed (failed[i]), each
// backend's fastest, and every one within pct% of the fastest of all. Pure, for the CPU tests.
std::vector<bool> screen_keep(const std::vector<std::string>& backends, const std::vector<double>& us,
                              const std::vector<bool>& failed, double pct);

// Which choices a tune times once more, with more graph instances (fp8route tune --final): those
// that did not fail and lie within pct% of the fastest, fastest first; none unless there are at
// least two (a near-tie to settle). Pure, for the CPU tests.
std::vector<size_t> final_round(const std::vector<double>& us, const std::vector<bool>& failed, double pct);

}  // namespace fp8route::timing
