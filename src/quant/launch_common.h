#pragma once
// Host helpers shared by the quantization launchers (group_quant.cu, token_quant.cu,
// tensor_quant.cu): the SM90 check, the input dtype dispatch, the launch shape with PDL, and the
// argument checks and parameters of the row ops (per-token and per-tensor). Included by .cu files
// only (it includes device code).

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/checks.h"
#include "core/launch.h"
#include "fp8route/quant_layout.h"
#include "fp8route/tensor.h"
#include "quant/row_common.cuh"

namespace fp8route::quant_launch {

using detail::check_aligned;
using detail::check_contiguous_shape;
using detail::check_device_tensor;
using detail::check_dtype;
using detail::check_ndim;
using detail::check_no_overlap;
using detail::check_same_device;
using kernels::RowQuantParams;

inline void check_sm90() { detail::check_sm90_device("quantization kernels"); }

// Calls f.template operator()<CudaType>() for a 16/32-bit float dtype.
template <class F>
void dispatch_float(DType t, F&& f) {
  switch (t) {
    case DType::f32: return f.template operator()<float>();
    case DType::f16: return f.template operator()<__half>();
    case DType::bf16: return f.template operator()<__nv_bfloat16>();
    default: break;
  }
  FP8ROUTE_CHECK(false, "x: dtype " << dtype_name(t) << " is not f32, f16 or bf16");
}

// Every quant kernel is launched with programmatic dependent launch (core/launch.h): it may start
// while the previous kernel finishes and waits (griddep_wait) before its first read.
inline LaunchShape pdl_shape(dim3 grid, dim3 block, size_t smem = 0) {
  return LaunchShape{grid, block, smem, dim3(0, 0, 0), true};
}

// x [T, H] of the per-token and per-tensor ops: any H >= 1, any row stride >= H, a pointer aligned
// to its element (the kernels pick their vector or any-width form by the layout: vector_rows).
inline void check_row_input(const TensorView& x) {
  check_device_tensor(x, "x");
  check_dtype(x, "x", {DType::bf16, DType::f16, DType::f32});
  check_ndim(x, "x", 2, "[T, H]");
  FP8ROUTE_CHECK(x.stride(1) == 1, "x: last dim must be contiguous (stride 1), got " << to_string(x));
  FP8ROUTE_CHECK(x.size(1) > 0, "x: H = " << x.size(1) << " must be positive");
  check_aligned(x.data, dtype_size(x.dtype), "x");
  FP8ROUTE_CHECK(x.stride(0) >= x.size(1), "x: row stride must be >= H, got " << to_string(x));
}

// q [T, H] beside x; H = x's last dim unless given (the fused form's x is [T, 2H]).
inline void check_codes(const TensorView& q, const TensorView& x, int64_t hidden = -1) {
  check_device_tensor(q, "q");
  check_dtype(q, "q", {DType::e4m3, DType::i8});
  const int64_t shape[2] = {x.size(0), hidden < 0 ? x.size(1) : hidden};
  check_contiguous_shape(q, "q", shape, 2);
  check_same_device(q, "q", x, "x");
  check_no_overlap(q, "q", x, "x");
}

// The scale tensor of a row or tensor quant (s or scale) beside x and q: one device; an output
// scale shares no byte with x or q, an input one none with q.
inline void check_scale_operand(const TensorView& t, const char* name, bool output, const TensorView& x, const TensorView& q) {
  check_same_device(t, name, x, "x");
  check_no_overlap(q, "q", t, name);
  if (output) check_no_overlap(t, name, x, "x");
}

inline RowQuantParams row_params(const TensorView& x, const TensorView& q) {
  RowQuantParams p{};
  p.x = x.data;
  p.x_stride_t = x.stride(0);
  p.rows = x.size(0);
  p.hidden = x.size(1);
  p.q = static_cast<uint8_t*>(q.data);
  p.qmax = code_qmax(q.dtype);
  p.int8 = q.dtype == DType::i8;
  return p;
}

// Whether the row kernels may take their vector form (row_common.cuh, "Rows of any width"): H a
// multiple of 8, every row of x 16-byte aligned (in the fused form the up half too, H elements into
// the row) and every row of q 8-byte aligned. Set p.hidden (the fused form's H) first.
inline bool vector_rows(const RowQuantParams& p, DType x_dtype) {
  const auto address = [](const void* a) { return reinterpret_cast<uintptr_t>(a); };
  return p.hidden % kernels::kQuantVec == 0 && address(p.x) % 16 == 0 && address(p.q) % 8 == 0 &&
         (p.rows <= 1 || p.x_stride_t * dtype_size(x_dtype) % 16 == 0);
}

// Calls f.template operator()<CudaType, kAligned>() for the input dtype and the row kernels' form.
template <class F>
void dispatch_row(DType t, bool aligned, F&& f) {
  dispatch_float(t, [&]<class InT>() {
    if (aligned) f.template operator()<InT, true>();
    else f.template operator()<InT, false>();
  });
}

// The per-token kernel, not fused, over the rows of p (p.hidden elements each), in its vector form
// when `aligned` (vector_rows): per_token_quant, and the one-block path of per_tensor_quant_dynamic.
// Defined in token_quant.cu, the one translation unit that instantiates the per-token kernel.
void launch_token_rows(const RowQuantParams& p, DType x_dtype, bool aligned, const LaunchShape& shape,
                       cudaStream_t stream);

// The owner table of a scatter: owner[d] = the largest entry t * topk + j with src2dst[t, j] = d, -1
// where none (scratch of `rows` int32 of the stream, or of the graph being captured, reset and filled
// on `stream`). `what` names the op in a scratch allocation error. Defined in group_quant.cu.
const int32_t* scatter_owners(const TensorView& src2dst, int64_t rows, cudaStream_t stream, const char* what);

}  // namespace fp8route::quant_launch
