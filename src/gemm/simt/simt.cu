// The "reference" GEMM backend (kernel fp8_gemm_simt): launcher of kernel.cuh. Supports every valid
// problem. Not the CPU reference of src/reference.

#include "gemm/simt/simt.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "fp8route/tuning/cuda_check.h"
#include "gemm/simt/kernel.cuh"

namespace fp8route::gemm {
namespace {

kernels::SimtParams params(const GemmProblem& p, const GemmOperands& ops) {
  kernels::SimtParams k{};
  k.a = ops.a;
  k.b = ops.b;
  k.sa = ops.sa;
  k.sb = ops.sb;
  k.bias = ops.bias;
  k.lda = ops.lda;
  k.ldb = ops.ldb;
  k.m = static_cast<int>(p.m);
  k.n = static_cast<int>(p.n);
  k.k = static_cast<int>(p.k);
  k.num_rows = static_cast<int>(p.m);
  k.scale_kind = static_cast<int>(p.scale);
  k.sa_vector = p.sa_vector;
  k.sb_vector = p.sb_vector;
  k.sa_ld = static_cast<int>((p.m + 3) / 4 * 4);
  const int kb = static_cast<int>((p.k + 127) / 128);
  k.sb_ld = p.sb_padded ? (kb + 3) / 4 * 4 : kb;
  k.bias_dtype = ops.bias == nullptr ? 0 : p.out == DType::bf16 ? 1 : 2;
  return k;
}

template <class OutT>
void launch(const kernels::SimtParams& k, cudaStream_t stream) {
  if (k.num_rows == 0 || k.n == 0) return;
  const dim3 grid((k.n + kernels::kSimtTile - 1) / kernels::kSimtTile,
                  (k.num_rows + kernels::kSimtTile - 1) / kernels::kSimtTile);
  FP8ROUTE_CHECK(grid.y <= 65535, "reference: at most " << 65535 * kernels::kSimtTile << " rows");
  kernels::fp8_gemm_simt<OutT><<<grid, kernels::kSimtThreads, 0, stream>>>(k);
  FP8ROUTE_CHECK_LAUNCH();
}

class ReferenceBackend final : public GemmBackend {
 public:
  std::string_view name() const override { return "reference"; }
  const std::vector<std::string>& configs() const override {
    static const std::vector<std::string> c = {"simt_64x64"};
    return c;
  }
  std::string supports(const GemmProblem& p, int) const override {
    if (p.m > int64_t{65535} * kernels::kSimtTile) return "reference: M above 65535 * 64 rows";
    // The kernel holds M, N and K in int32 (SimtParams).
    constexpr int64_t kMaxInt = (int64_t{1} << 31) - 1;
    if (p.n > kMaxInt || p.k > kMaxInt)
      return "reference: N and K must each be < 2^31 (int32 extents), got n=" + std::to_string(p.n) +
             " k=" + std::to_string(p.k);
    return "";
  }
  bool slow_fallback() const override { return true; }
  void run(const GemmProblem& p, const GemmOperands& ops, int, cudaStream_t stream) const override {
    kernels::SimtParams k = params(p, ops);
    k.out = ops.out;
    k.ldo = ops.ldo;
    if (p.out == DType::bf16)
      launch<__nv_bfloat16>(k, stream);
    else
      launch<__half>(k, stream);
  }
};

}  // namespace

void simt_rows_f32(const GemmProblem& p, const GemmOperands& ops, const int32_t* rows,
                   int64_t num_rows, float* out_f32, cudaStream_t stream) {
  kernels::SimtParams k = params(p, ops);
  k.rows = rows;
  k.num_rows = static_cast<int>(num_rows);
  k.out = out_f32;
  k.ldo = p.n;
  launch<float>(k, stream);
}

const GemmBackend& reference_backend() {
  static const ReferenceBackend b;
  return b;
}

}  // namespace fp8route::gemm
