// The default backend choice where no routing table has an entry for a problem: an ordered
// list of (scale kind, M range) -> (backend, config) rules read off side-by-side runs of every
// backend on the H200 (docs/design.md, "The heuristic"); the first rule that matches and whose config
// supports the problem runs (a config of the fast class does not support a problem that asks for
// accum=precise). Unaligned or odd shapes fall through to the fallbacks, which end with the
// reference backend (it supports every valid problem, and accumulates precisely).

#include <cstdint>
#include <string>

#include "fp8route/error.h"
#include "fp8route/gemm.h"
#include "gemm/backend.h"
#include "route/heuristic.h"

namespace fp8route {

namespace {

struct Rule {
  ScaleKind kind;
  int64_t max_m;  // the rule applies to M <= max_m
  const char* backend;
  const char* config;
  const char* why;
};

// Each line carries the measured reason (H200, N x K = 4096 x 14336, 28672 x 4096, 2112 x 7168).
constexpr Rule kRules[] = {
    // cuBLASLt's per-tensor kernels were fastest at every M measured (CUTLASS's tensor path is
    // its row kernel with scalar scales, slower).
    {ScaleKind::tensor, INT64_MAX, "cublaslt", "heuristic", "tensor: cuBLASLt fastest at every measured M"},
    // accum=precise rules the line above out: cuBLASLt asked as torch._scaled_mm asks by default
    // (use_fast_accum=False), the kernel a torch user gets for the same call.
    {ScaleKind::tensor, INT64_MAX, "cublaslt", "precise", "tensor, accum=precise: cuBLASLt as torch asks it"},
    // Row scales, small M: cuBLASLt's OUTER_VEC kernels run at about half its per-tensor speed.
    // The CUTLASS swap-AB configs below were, per M band, the single config closest to the best
    // of every backend over all models.json layers at TP 1-8.
    {ScaleKind::row, 16, "cutlass_sm90", "row_64x16x128_1x1x1_pingpong_swapab", "row, M <= 16: CUTLASS 64x16 pingpong swap-AB"},
    {ScaleKind::row, 32, "cutlass_sm90", "row_128x16x128_1x1x1_coop_fastacc_streamk_swapab", "row, M <= 32: CUTLASS 128x16 stream-K swap-AB"},
    {ScaleKind::row, 64, "cutlass_sm90", "row_64x64x128_1x1x1_pingpong_swapab", "row, M <= 64: CUTLASS 64x64 pingpong swap-AB"},
    {ScaleKind::row, 128, "cutlass_sm90", "row_128x64x128_1x1x1_coop_streamk_swapab", "row, M <= 128: CUTLASS swap-AB 1.06-1.5x cuBLASLt"},
    // Row scales, M >= 512: within a few percent either way; cuBLASLt won more shapes.
    {ScaleKind::row, INT64_MAX, "cublaslt", "heuristic", "row, M > 128: cuBLASLt, within 4% of CUTLASS either way"},
    // Block scales: cuBLASLt needs M % 4 == 0 (and ceil(K/128) % 4 == 0 for fp8route's scale_b);
    // CUTLASS's swap-AB configs matched or beat it up to M = 64.
    {ScaleKind::block, 16, "cutlass_sm90", "block_128x16x128_1x1x1_coop_streamk_swapab", "block, M <= 16: CUTLASS swap-AB"},
    {ScaleKind::block, 64, "cutlass_sm90", "block_128x32x128_1x1x1_coop_streamk_swapab", "block, M <= 64: CUTLASS swap-AB"},
    {ScaleKind::block, INT64_MAX, "cublaslt", "heuristic", "block, M > 64: cuBLASLt where it can"},
    {ScaleKind::block, INT64_MAX, "cutlass_sm90", "block_128x128x128_1x2x1_coop", "block: CUTLASS, cuBLASLt cannot run it"},
};

// Whatever the rules did not place: the first supported of these.
constexpr Rule kFallbacks[] = {
    {ScaleKind::tensor, INT64_MAX, "cublaslt", "heuristic", "fallback: cuBLASLt"},
    {ScaleKind::tensor, INT64_MAX, "cutlass_sm90", "row_128x128x128_1x1x1_coop_fastacc_streamk", "fallback: CUTLASS"},
    // accum=precise rules out the fast-class configs above (tensor and row scales): CUTLASS's
    // precise row config for any M.
    {ScaleKind::tensor, INT64_MAX, "cutlass_sm90", "row_64x128x128_1x1x1_pingpong", "fallback: CUTLASS, precise accumulation"},
    {ScaleKind::tensor, INT64_MAX, "reference", "simt_64x64", "fallback: reference, no fast backend supports this problem"},
};

}  // namespace

GemmChoice gemm_select(const GemmProblem& p) {
  std::string skipped;
  auto try_rule = [&](const Rule& r) -> bool {
    const std::string why = gemm_supports(r.backend, r.config, p);
    if (why.empty()) return true;
    skipped += (skipped.empty() ? "" : "; ") + std::string(r.backend) + "/" + r.config + ": " + why;
    return false;
  };
  for (const Rule& r : kRules)
    if (r.kind == p.scale && p.m <= r.max_m && try_rule(r))
      return {r.backend, r.config, r.why + (skipped.empty() ? std::string() : " (skipped " + skipped + ")")};
  for (const Rule& r : kFallbacks)
    if (try_rule(r))
      return {r.backend, r.config, r.why + (skipped.empty() ? std::string() : " (skipped " + skipped + ")")};
  FP8ROUTE_FAIL(ErrorCategory::unsupported, "no backend can run " << to_string(p) << ": " << skipped);
}

namespace heuristic {

std::string slow_fallback_note(const GemmProblem& p) {
  std::string s =
      "slow path: the reference kernel (CUDA cores, tens of times slower than a fast backend) runs it: "
      "no fast backend supports this problem";
  if (p.align < 16)
    s += "; every fast backend needs a, b and out at 16-byte aligned addresses with row strides of a "
         "multiple of 16 bytes (TMA, cuBLASLt FP8), and this call has align=" +
         std::to_string(p.align) +
         " (a view that starts inside a row: a column slice, or a row slice of a matrix whose rows are not "
         "a multiple of 16 bytes); a contiguous copy of that operand runs on a fast backend (scales and bias "
         "may sit at any element offset)";
  if (p.k % 16 != 0)
    s += "; every fast backend needs K % 16 == 0 (16-byte loads of a's and b's rows), K=" + std::to_string(p.k);
  return s;
}

}  // namespace heuristic

}  // namespace fp8route
