#pragma once
// Device operands for timing and checking scaled GEMMs (gemm_bench, fp8route tune/bench/check):
// `sets` independent copies of a problem's a, b and out (rotated through so the weights come from
// HBM, measure.h), random E4M3 codes over the whole range, positive scales, optional bias.

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "fp8route/tuning/measure.h"
#include "fp8route/buffer.h"
#include "fp8route/gemm.h"

namespace fp8route::timing {

struct GemmOperandSets {
  std::vector<DeviceBuffer> a, b, out;
  DeviceBuffer sa, sb, bias;  // small, shared by every set
  std::vector<ScaledMmArgs> args;
};

// exact: small integers and power-of-two scales, so that every backend's result is exact.
// scale_offset: scale_a, scale_b and bias start that many elements into their buffers (a slice of a
// larger tensor, only element-aligned when the offset is not a multiple of 16 bytes).
GemmOperandSets make_gemm_operands(const GemmProblem& p, int sets, uint64_t seed, bool exact = false,
                                   int64_t scale_offset = 0);

// Bytes one call reads and writes (a, b, out), for rotation_sets().
int64_t gemm_call_bytes(const GemmProblem& p);

// Times backend/config on the sets; an empty backend times the routed entry point scaled_mm(args).
Measurement measure_gemm(const GemmOperandSets& o, const std::string& backend, const std::string& config,
                         const MeasureOptions& opt = {});

// Several (backend, config) side by side on the same sets, interleaved (measure_interleaved); an
// empty backend is the routed entry point. A choice that fails gets Measurement::error.
std::vector<Measurement> measure_gemms(const GemmOperandSets& o,
                                       const std::vector<std::pair<std::string, std::string>>& choices,
                                       const MeasureOptions& opt = {});

// A screen before measure_gemms: every choice timed once cheaply (one graph instance, 5 replays,
// 2 warm-ups, interleaved as always). Kept, in their order: the routed entry point (empty backend),
// each backend's fastest choice, every choice within pct% of the fastest of all, and any that failed
// (so the full run reports why). A choice dropped here was more than pct% behind another in the same
// round (pct = 25 is beyond the 5-15% by which stream-K graph instances scatter). It also sets the
// power mix of the full run: under the H200's 700 W cap the clock follows the mix of kernels being
// replayed, and configs far behind (small tiles at large M) draw less and raise it for all.
struct Screen {
  std::vector<std::pair<std::string, std::string>> kept, dropped;
  std::vector<double> dropped_us;  // the screen's median of each dropped choice
};
Screen screen_gemms(const GemmOperandSets& o, const std::vector<std::pair<std::string, std::string>>& choices,
                    const MeasureOptions& opt, double pct);

// screen_keep (measure.h) of choices already measured (`ms`, in the order of `choices`; a choice
// with Measurement::error counts as failed): what screen_gemms keeps of its quick round, and what
// bench --recheck times again of its first pass.
std::vector<bool> screen_keep(const std::vector<std::pair<std::string, std::string>>& choices,
                              const std::vector<Measurement>& ms, double pct);

// The weight-read floor: a kernel that only reads `bytes` from p (L1 bypassed, every SM).
void enqueue_read_floor(const void* p, int64_t bytes, cudaStream_t stream);
Measurement measure_read_floor(const GemmOperandSets& o, const MeasureOptions& opt = {});

// The quantization floor: one launch that reads in_bytes (a multiple of 16) from `in` and writes
// half as many bytes to `out`, one thread per 16 bytes, no arithmetic. A quant kernel of the same
// bytes cannot be faster; at decode sizes this is the launch-and-latency floor.
void enqueue_pass_floor(const void* in, int64_t in_bytes, void* out, cudaStream_t stream);

inline double tflops(const GemmProblem& p, double us) { return 2.0 * p.m * p.n * p.k / (us * 1e-6) / 1e12; }
inline double weight_gbps(const GemmProblem& p, double us) { return double(p.n) * p.k / (us * 1e-6) / 1e9; }

}  // namespace fp8route::timing
