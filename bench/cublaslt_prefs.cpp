// cublaslt_prefs: which cuBLASLt matmul preferences give the fastest per-tensor FP8 GEMM for a
// shape, next to fp8route's routed call. torch._scaled_mm asks cuBLASLt with its own preferences
// (no minimum-alignment hints, its workspace size); fp8route's cuBLASLt backend with others (16-byte
// alignment, a 32 MiB workspace). For each preference set the heuristic's first algorithms are
// timed side by side with the routed scaled_mm by the one timing method (interleaved, graph replay,
// cold L2: fp8route/tuning/measure.h), and each algorithm is named by its attributes.
//
//   cublaslt_prefs --n 2112 --k 7168 --m 1,4,16,64 [--top 4] [--align 0,16,256] [--workspace-mib 1,4,32]

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "common/args.h"
#include "fp8route/buffer.h"
#include "fp8route/device.h"
#include "fp8route/gemm.h"
#include "fp8route/tuning/cuda_check.h"
#include "fp8route/tuning/gemm_operands.h"
#include "fp8route/tuning/measure.h"

using namespace fp8route;

namespace {

struct Candidate {
  std::string label;
  cublasLtMatmulAlgo_t algo;
  size_t workspace = 0;
};

std::string algo_name(const cublasLtMatmulAlgo_t& algo) {
  int id = 0, tile = 0, splitk = 0, stages = 0;
  size_t got = 0;
  cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_ID, &id, sizeof id, &got);
  cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof tile, &got);
  cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splitk, sizeof splitk, &got);
  cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_STAGES_ID, &stages, sizeof stages, &got);
  return "algo=" + std::to_string(id) + " tile=" + std::to_string(tile) + " stages=" + std::to_string(stages) +
         " splitk=" + std::to_string(splitk);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"cuBLASLt preferences against fp8route's routed per-tensor FP8 GEMM"};
  int64_t n = 0, k = 0;
  std::string ms_text = "1,4,16,64", align_text = "0,16,256", ws_text = "1,4,32";
  size_t top = 4;
  app.add_option("--n", n, "output features (N)")->required()->check(CLI::Range(int64_t{16}, int64_t{1} << 20));
  app.add_option("--k", k, "input features (K), a multiple of 16")
      ->required()
      ->check(CLI::Range(int64_t{16}, int64_t{1} << 20));
  app.add_option("--m", ms_text, "tokens, comma-separated");
  app.add_option("--top", top, "algorithms of the heuristic timed per preference set")->check(CLI::Range(1, 16));
  app.add_option("--align", align_text, "minimum alignments (bytes) to hint, comma-separated; 0: no hint");
  app.add_option("--workspace-mib", ws_text, "workspace limits (MiB), comma-separated");
  CLI11_PARSE(app, argc, argv);
  if (k % 16 != 0) {
    std::fprintf(stderr, "cublaslt_prefs: --k must be a multiple of 16, got %lld\n", static_cast<long long>(k));
    return 2;
  }
  if (cuda_device_count() == 0) {
    std::fprintf(stderr, "cublaslt_prefs: needs a GPU: %s\n", cuda_unavailable_reason().c_str());
    return 1;
  }
  try {
    const std::vector<int64_t> ms = tools::parse_int_list(ms_text, "--m");
    const std::vector<int64_t> aligns = tools::parse_int_list(align_text, "--align", 0, 4096);
    const std::vector<int64_t> workspaces = tools::parse_int_list(ws_text, "--workspace-mib");

    cublasLtHandle_t handle;
    FP8ROUTE_CUBLAS_CHECK(cublasLtCreate(&handle));
    int64_t ws_max = 0;
    for (int64_t w : workspaces) ws_max = std::max(ws_max, w);
    DeviceBuffer workspace(size_t(ws_max) << 20);
    timing::MeasureOptions mo;
    for (int64_t m : ms) {
      const GemmProblem p = make_problem(m, n, k, ScaleKind::tensor, DType::bf16);
      const int sets = timing::rotation_sets(timing::gemm_call_bytes(p), mo);
      const timing::GemmOperandSets ops = timing::make_gemm_operands(p, sets, 0xC0B1A5ull + uint64_t(m));
      // out[M, N] row-major = (a[M, K] @ b[N, K]^T) * sa * sb: in cuBLASLt's column-major terms
      // D[N, M] = B^T[N, K] x A[K, M], as fp8route's backend and torch call it.
      cublasLtMatmulDesc_t desc;
      FP8ROUTE_CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
      const int32_t trans_a = CUBLAS_OP_T, trans_b = CUBLAS_OP_N;
      const int8_t fast = 1;
      const void* sa = ops.args[0].scale_a.data;
      const void* sb = ops.args[0].scale_b.data;
      FP8ROUTE_CUBLAS_CHECK(
          cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &trans_a, sizeof trans_a));
      FP8ROUTE_CUBLAS_CHECK(
          cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &trans_b, sizeof trans_b));
      FP8ROUTE_CUBLAS_CHECK(
          cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, sizeof fast));
      FP8ROUTE_CUBLAS_CHECK(
          cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &sb, sizeof sb));
      FP8ROUTE_CUBLAS_CHECK(
          cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &sa, sizeof sa));
      cublasLtMatrixLayout_t la, lb, ld;
      FP8ROUTE_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&la, CUDA_R_8F_E4M3, k, n, k));
      FP8ROUTE_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_8F_E4M3, k, m, k));
      FP8ROUTE_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&ld, CUDA_R_16BF, n, m, n));

      std::vector<Candidate> cands;
      for (int64_t align : aligns)
        for (int64_t ws_mib : workspaces) {
          cublasLtMatmulPreference_t pref;
          FP8ROUTE_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
          const uint64_t ws_bytes = uint64_t(ws_mib) << 20;
          FP8ROUTE_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                                     &ws_bytes, sizeof ws_bytes));
          if (align > 0) {
            const uint32_t a32 = static_cast<uint32_t>(align);
            for (auto attr : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                              CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
              FP8ROUTE_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, attr, &a32, sizeof a32));
          }
          std::vector<cublasLtMatmulHeuristicResult_t> found(top);
          int count = 0;
          FP8ROUTE_CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(handle, desc, la, lb, ld, ld, pref, int(top),
                                                               found.data(), &count));
          for (int i = 0; i < count; ++i)
            cands.push_back({"align " + std::to_string(align) + " ws " + std::to_string(ws_mib) + " MiB #" +
                                 std::to_string(i),
                             found[i].algo, found[i].workspaceSize});
          cublasLtMatmulPreferenceDestroy(pref);
        }

      std::vector<timing::Enqueue> run;
      const float one = 1.0f, zero = 0.0f;
      for (const Candidate& c : cands)
        run.push_back([&, c](int set, cudaStream_t stream) {
          const ScaledMmArgs& x = ops.args[set];
          FP8ROUTE_CUBLAS_CHECK(cublasLtMatmul(handle, desc, &one, x.b.data, la, x.a.data, lb, &zero, x.out.data, ld,
                                               x.out.data, ld, &c.algo, workspace.data(), c.workspace, stream));
        });
      run.push_back([&](int set, cudaStream_t stream) { scaled_mm(ops.args[set], stream); });
      const std::vector<timing::Measurement> t = timing::measure_interleaved(run, sets, mo);
      std::printf("m=%lld n=%lld k=%lld (per-tensor, bf16 out; %d rotation sets)\n", static_cast<long long>(m),
                  static_cast<long long>(n), static_cast<long long>(k), sets);
      for (size_t i = 0; i < t.size(); ++i) {
        const std::string what = i < cands.size() ? cands[i].label + "  " + algo_name(cands[i].algo) +
                                                        " ws=" + std::to_string(cands[i].workspace)
                                                  : std::string("fp8route scaled_mm (routed)");
        if (t[i].error.empty()) std::printf("  %9.3f us  %s\n", t[i].median_us, what.c_str());
        else std::printf("  %12s  %s: %s\n", "failed", what.c_str(), t[i].error.c_str());
      }
      cublasLtMatrixLayoutDestroy(la), cublasLtMatrixLayoutDestroy(lb), cublasLtMatrixLayoutDestroy(ld);
      cublasLtMatmulDescDestroy(desc);
    }
    cublasLtDestroy(handle);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cublaslt_prefs: %s\n", e.what());
    return 1;
  }
  return 0;
}
