// Launchers of the per-token quantization and its fused silu_and_mul form: argument checks,
// parameters, dispatch, launch. Device code: token_kernel.cuh.

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "core/checks.h"
#include "fp8route/tuning/cuda_check.h"
#include "core/launch.h"
#include "fp8route/quant.h"
#include "quant/launch_common.h"
#include "quant/token_kernel.cuh"

namespace fp8route {

namespace quant_launch {
namespace {

// The per-token kernel for rows of p.hidden elements, with the register vectors such a row needs
// (token_kernel.cuh, token_reg_vecs).
template <class InT, bool kFused, bool kAligned>
void launch_token_kernel(const RowQuantParams& p, const LaunchShape& shape, cudaStream_t stream) {
  const int64_t vecs = (p.hidden + kernels::kQuantVec - 1) / kernels::kQuantVec;
  switch (kernels::token_reg_vecs(vecs)) {
    case 1: launch_kernel(kernels::per_token_quant_kernel<InT, kFused, kAligned, 1>, shape, stream, p); break;
    case 2: launch_kernel(kernels::per_token_quant_kernel<InT, kFused, kAligned, 2>, shape, stream, p); break;
    case 4: launch_kernel(kernels::per_token_quant_kernel<InT, kFused, kAligned, 4>, shape, stream, p); break;
    case 8: launch_kernel(kernels::per_token_quant_kernel<InT, kFused, kAligned, 8>, shape, stream, p); break;
    default: launch_kernel(kernels::per_token_quant_kernel<InT, kFused, kAligned, 0>, shape, stream, p); break;
  }
}

}  // namespace

void launch_token_rows(const RowQuantParams& p, DType x_dtype, bool aligned, const LaunchShape& shape,
                       cudaStream_t stream) {
  dispatch_row(x_dtype, aligned,
               [&]<class InT, bool kAligned>() { launch_token_kernel<InT, false, kAligned>(p, shape, stream); });
}

}  // namespace quant_launch

using kernels::RowQuantParams;
using namespace quant_launch;

namespace {

// per_token_quant, or (fused) silu_and_mul of x [T, 2H] then per_token_quant of the result.
void token_quant(const TensorView& x, const TensorView& q, const TensorView& s, ScaleRounding rounding, bool fused,
                 cudaStream_t stream) {
  check_row_input(x);
  if (fused)
    FP8ROUTE_CHECK(x.size(1) % 2 == 0, "x: the fused silu_and_mul form takes [T, 2 x hidden] ([gate | up]): its last "
                                         "dim must be even, got " << to_string(x));
  const int64_t hidden = fused ? x.size(1) / 2 : x.size(1);
  check_codes(q, x, hidden);
  check_device_tensor(s, "s");
  check_dtype(s, "s", {DType::f32});
  const int64_t shape[1] = {x.size(0)};
  check_contiguous_shape(s, "s", shape, 1);
  check_aligned(s.data, 4, "s");
  check_scale_operand(s, "s", true, x, q);
  FP8ROUTE_CHECK(rounding == ScaleRounding::none || rounding == ScaleRounding::pow2, "rounding: not none or pow2");
  FP8ROUTE_CHECK(x.size(0) <= 0x7FFFFFFF, "x: at most 2^31-1 rows, got " << x.size(0));
  // The kernel walks a row's vectors with int offsets (v * 8): a row must stay below 2^31 elements.
  FP8ROUTE_CHECK(x.size(1) <= 0x7FFFFFFF, "x: H = " << x.size(1) << " must be < 2^31 (one row's elements are indexed in int32)");
  if (x.size(0) == 0) return;
  check_sm90();
  RowQuantParams p = row_params(x, q);
  p.hidden = hidden;
  p.s = static_cast<float*>(s.data);
  p.pow2 = rounding == ScaleRounding::pow2;
  const LaunchShape grid_shape = pdl_shape(dim3(static_cast<unsigned>(x.size(0))), kernels::kRowThreads);
  dispatch_row(x.dtype, vector_rows(p, x.dtype), [&]<class InT, bool kAligned>() {
    if (fused) launch_token_kernel<InT, true, kAligned>(p, grid_shape, stream);
    else launch_token_kernel<InT, false, kAligned>(p, grid_shape, stream);
    FP8ROUTE_CHECK_LAUNCH();
  });
}

}  // namespace

void per_token_quant(const TensorView& x, const TensorView& q, const TensorView& s,
                     ScaleRounding rounding, cudaStream_t stream) {
  token_quant(x, q, s, rounding, false, stream);
}

void silu_and_mul_per_token_quant(const TensorView& x, const TensorView& q, const TensorView& s,
                                  ScaleRounding rounding, cudaStream_t stream) {
  token_quant(x, q, s, rounding, true, stream);
}

}  // namespace fp8route
