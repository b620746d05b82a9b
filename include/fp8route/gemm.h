#pragma once
// Scaled FP8 GEMM (docs/design.md, GEMM backends):
//   y[M, N] = (sum_k a[m, k] * b[n, k]) * sa * sb (+ bias[n])
// a = E4M3 [M, K] and b = E4M3 [N, K] (the nn.Linear weight layout), both with unit last stride;
// fp32 accumulation; y bf16 or f16 [M, N] with unit last stride; bias (optional) [N] in y's dtype.
//
// | scale kind | scale_a                                        | scale_b                            |
// | tensor     | f32, one element                               | f32, one element                   |
// | row        | f32 [M] per token, or one element              | f32 [N] per channel, or one element|
// | block      | f32 [ceil(K/128), align(M, 4)] (1x128, M-major)| f32 [ceil(N/128), ceil(K/128)]     |
//
// Block scale_b may also be the padded form cuBLASLt reads: the same [ceil(N/128), ceil(K/128)]
// view with row stride align(ceil(K/128), 4) (GemmProblem::sb_padded).
//
// The forms inference engines pass (torch._scaled_mm, CUTLASS- and DeepGEMM-style calls) are taken
// too, each as the memory of a form above, decided by shapes and strides alone:
// - b as the [K, N] transpose view of an [N, K] weight (weight.t(): stride(0) == 1). Where the
//   shape fits both (K == N), unit last stride means [N, K] and unit first stride [K, N]. A
//   row-major [K, N] b is an error naming b.
// - row scales of any shape with M (N) elements, contiguous: [M], [M, 1]; [N], [N, 1], [1, N]; one
//   element ([1], [1, 1]) for a scalar.
// - block scale_b as its [ceil(K/128), ceil(N/128)] transpose view (stride(0) == 1); a square shape:
//   the strides decide, as for b.
// - block scale_a as an [M, ceil(K/128)] view. Strides [1, align(M, 4)], the physical buffer's
//   transpose view (what M-major group quantization with TMA-aligned scales returns), are read in
//   place, as is any view of that same memory (one K block with M % 4 == 0); other strides (the
//   K-major [M, ceil(K/128)] tensor of row-major group quantization, or an M-major buffer with
//   another row stride) are gathered by scaled_mm() and LinearPlan::run into a workspace of the
//   stream (one small kernel, graph-capturable). A contiguous
//   tensor whose shape is both forms (M == ceil(K/128), M % 4 == 0) is the physical form.
//
// Every function checks its arguments before anything is enqueued and throws Error naming the
// argument and the rule; work is enqueued on `stream`, nothing synchronizes, and every backend
// can be captured in a CUDA graph.

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "fp8route/dtype.h"
#include "fp8route/scale_kind.h"
#include "fp8route/tensor.h"

namespace fp8route {

// How a config sums the K products (docs/numerics.md, Accumulation class):
// - precise: the tensor core sums at most 128 of K before the partial sum is added into an fp32
//   total (CUTLASS configs without _fastacc, cuBLASLt with block scales or in its "preciseN"
//   configs, skinny, decode; the reference kernel is fp32 throughout): what torch._scaled_mm
//   computes by default (use_fast_accum=False).
// - fast: the FP8 tensor core's own accumulator carried over all of K, which keeps fewer bits than
//   fp32 (CUTLASS _fastacc configs, cuBLASLt's other configs with tensor and row scales): faster,
//   and what vLLM and SGLang run (use_fast_accum=True).
// A call asks for one: fast (the default) lets every config run it, since a precise config is at
// least as accurate; precise routes among precise configs only.
enum class Accum : uint8_t { fast, precise };
std::string_view name(Accum a);  // "fast", "precise"
// "fast" or "precise"; anything else throws Error(invalid_argument) naming `accum`.
Accum parse_accum(std::string_view s);

// The one description of a GEMM: routing key, benchmark row, log line and error context.
struct GemmProblem {
  int64_t m = 0, n = 0, k = 0;
  ScaleKind scale = ScaleKind::tensor;
  DType out = DType::bf16;
  bool bias = false;
  // row kind: whether scale_a is per token [M] and scale_b per channel [N] (false = one scalar).
  // tensor kind: both false. block kind: both true.
  bool sa_vector = false, sb_vector = false;
  // Largest power of two <= 16 dividing, in bytes, every base pointer and leading-dimension stride
  // of a, b and y. The fast backends need 16 (TMA and cuBLASLt FP8); the reference takes any.
  // Scale and bias pointers are not in it: every backend takes them at their element alignment (a
  // slice of a larger scale tensor), copying them to aligned scratch where its kernels need 16.
  int align = 16;
  // block kind: scale_b's rows are padded to a multiple of 4 floats (row stride align(ceil(K/128), 4)
  // instead of ceil(K/128)): the form cuBLASLt reads. Only set when ceil(K/128) % 4 != 0 (otherwise
  // the two forms are the same); LinearPlan prepares it, the other backends need the unpadded form.
  bool sb_padded = false;
  // The accumulation the caller asked for (Accum): precise rules out configs of the fast class.
  Accum accum = Accum::fast;

  bool operator==(const GemmProblem&) const = default;
};

// "row bf16 m=64 n=4096 k=14336 sa=vec sb=vec bias" (align is printed only when below 16, accum
// only when precise).
std::string to_string(const GemmProblem& p);

// A problem from its shape alone: vectors where the kind has them (row: per-token and per-channel,
// except that a vector of one element is a scalar, as check_scaled_mm sees it), aligned. For benchmarks, tuning and `explain`.
GemmProblem make_problem(int64_t m, int64_t n, int64_t k, ScaleKind scale,
                         DType out = DType::bf16, bool bias = false);

struct ScaledMmArgs {
  TensorView a;        // e4m3 [M, K]
  TensorView b;        // e4m3 [N, K], or its [K, N] transpose view (see above)
  TensorView scale_a;  // see the table above
  TensorView scale_b;
  TensorView bias;     // optional (data == nullptr: none): [N], dtype of out
  TensorView out;      // bf16 or f16 [M, N]
  ScaleKind scale = ScaleKind::tensor;
  Accum accum = Accum::fast;  // precise: only configs of the precise class run it (Accum)
};

// Checks every argument (throws Error(invalid_argument) naming it) and describes the problem.
GemmProblem check_scaled_mm(const ScaledMmArgs& args);

// The scale kind the shapes of scale_a and scale_b imply (args.scale is ignored), for callers that
// do not name one: tensor when both have one element; else row when scale_a is [M], [M, 1] or one
// element and scale_b [N], [N, 1], [1, N] or one element; else block when scale_a is
// [ceil(K/128), align(M, 4)] or [M, ceil(K/128)] and scale_b [ceil(N/128), ceil(K/128)] or
// [ceil(K/128), ceil(N/128)]. Row comes first: with K <= 128 an [M, 1] scale_a is also one block per
// row, and a scale_b that then fits both kinds makes them the same product. Throws
// Error(invalid_argument) naming a or b when their shapes do not make a GEMM, and scale_a, scale_b
// when no kind fits. Strides and dtypes are check_scaled_mm's to check.
ScaleKind infer_scale_kind(const ScaledMmArgs& args);

// The GEMM: checks the arguments once, routes the problem with the process-wide Router
// (default_router() in route.h: the measured routing table, else gemm_select()), runs the choice.
// Routes are cached per problem, so a repeated shape costs a hash lookup. M = 0 returns at once.
void scaled_mm(const ScaledMmArgs& args, cudaStream_t stream);

// The same on a chosen backend and config (names from gemm_backends()/gemm_configs()); throws
// Error(unsupported) with the backend's reason when it cannot run the problem.
void scaled_mm(const ScaledMmArgs& args, std::string_view backend, std::string_view config,
               cudaStream_t stream);

// ---- backends ------------------------------------------------------------------------------------

// Backend names in this build: "cublaslt", "cutlass_sm90", "skinny", "decode", "wgmma", "reference".
std::vector<std::string> gemm_backends();
// The configs a backend instantiates (each a name such as "128x128x128_1x2x1_pingpong").
std::vector<std::string> gemm_configs(std::string_view backend);
// Why `backend`/`config` cannot run `p` on device 0, or "" when it can (p.accum precise: a config
// of the fast class cannot).
std::string gemm_supports(std::string_view backend, std::string_view config, const GemmProblem& p);
// What `backend`/`config` runs for `p` on device 0, when the config's name does not say it all:
// for cuBLASLt's "heuristicN", the N-th ranked algorithm for packed operands, by its attributes
// ("algo=.. tile=.. stages=.. splitk=.. reduction=.. swizzle=.. custom=.. inner=.. cluster=..",
// cuBLASLt's enum numbers), which tell whether two runs or two library versions mean the same
// kernel by one rank. "" for the other backends, without an SM 9.0 GPU, and when the config cannot
// run `p`.
std::string gemm_describe(std::string_view backend, std::string_view config, const GemmProblem& p);

// The accumulation class of `backend`/`config` on problem p (cuBLASLt's depends on the scale kind).
Accum gemm_accum(std::string_view backend, std::string_view config, const GemmProblem& p);

struct GemmChoice {
  std::string backend, config;
  std::string why;  // the rule that chose it
};
// The default choice (until measured routing replaces it): the first supported of a short list per
// scale kind and M range, measured on the H200 (docs/design.md, the heuristic); see src/route/heuristic.cpp.
GemmChoice gemm_select(const GemmProblem& p);

}  // namespace fp8route
