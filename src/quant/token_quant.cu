// Launchers of the per-token quantization and its fused silu_and_mul form: argument checks,
// parameters, dispatch, launch. Device code: token_kernel.cuh.

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "core/checks.h"
#include "fp8route/tuning/chain_trace.h"
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
template <class InT, bool kFused, bool kAligned, bool kScatter = false, bool kMasked = false>
void launch_token_kernel(const RowQuantParams& params, const LaunchShape& shape, cudaStream_t stream) {
  RowQuantParams p = params;
  FP8ROUTE_TRACE(p.trace = chain_trace::next(kFused ? (kMasked ? "masked silu+token_quant" : "silu+token_quant")
                                                    : (kScatter ? "scatter token_quant" : "token_quant"),
                                             shape.grid, shape.block, shape.smem));
  const int64_t vecs = (p.hidden + kernels::kQuantVec - 1) / kernels::kQuantVec;
  switch (kernels::token_reg_vecs(vecs)) {
    case 1: launch_kernel(kernels::per_token_quant_kernel<InT, kFused, kAligned, 1, kScatter, kMasked>, shape, stream, p); break;
    case 2: launch_kernel(kernels::per_token_quant_kernel<InT, kFused, kAligned, 2, kScatter, kMasked>, shape, stream, p); break;
    case 4: launch_kernel(kernels::per_token_quant_kernel<InT, kFused, kAligned, 4, kScatter, kMasked>, shape, stream, p); break;
    case 8: launch_kernel(kernels::per_token_quant_kernel<InT, kFused, kAligned, 8, kScatter, kMasked>, shape, stream, p); break;
    default: launch_kernel(kernels::per_token_quant_kernel<InT, kFused, kAligned, 0, kScatter, kMasked>, shape, stream, p); break;
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

// Masked rows (masked_silu_and_mul_per_token_quant): the rows of x are [E, m_max] slabs, counts in
// masked_m (checked by the caller).
struct MaskedRows {
  const int32_t* masked_m = nullptr;
  int64_t m_max = 0;
};

// per_token_quant, or (fused) silu_and_mul of x [T, 2H] then per_token_quant of the result.
void token_quant(const TensorView& x, const TensorView& q, const TensorView& s, ScaleRounding rounding, bool fused,
                 cudaStream_t stream, MaskedRows masked = {}) {
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
  p.masked_m = masked.masked_m;
  p.m_max = static_cast<int32_t>(masked.m_max);
  const LaunchShape grid_shape = pdl_shape(dim3(static_cast<unsigned>(x.size(0))), kernels::kRowThreads);
  dispatch_row(x.dtype, vector_rows(p, x.dtype), [&]<class InT, bool kAligned>() {
    if (masked.masked_m) launch_token_kernel<InT, true, kAligned, false, true>(p, grid_shape, stream);
    else if (fused) launch_token_kernel<InT, true, kAligned>(p, grid_shape, stream);
    else launch_token_kernel<InT, false, kAligned>(p, grid_shape, stream);
    FP8ROUTE_CHECK_LAUNCH();
  });
}

// masked_silu_and_mul_per_token_quant: the fused per-token kernel over the [E * M_max] rows of x,
// skipping the rows past each expert's count.
void masked_token_quant(const TensorView& x, const TensorView& masked_m, const TensorView& q, const TensorView& s,
                        ScaleRounding rounding, cudaStream_t stream) {
  check_device_tensor(x, "x");
  check_dtype(x, "x", {DType::bf16, DType::f16, DType::f32});
  check_ndim(x, "x", 3, "[E, M_max, 2H]");
  FP8ROUTE_CHECK(x.is_contiguous(), "x: must be contiguous, got " << to_string(x));
  const int64_t experts = x.size(0), m_max = x.size(1);
  FP8ROUTE_CHECK(x.size(2) > 0 && x.size(2) % 2 == 0,
                 "x: [E, M_max, 2 x hidden] ([gate | up]): its last dim must be even and positive, got " << to_string(x));
  const int64_t hidden = x.size(2) / 2;
  check_device_tensor(masked_m, "masked_m");
  check_dtype(masked_m, "masked_m", {DType::i32});
  const int64_t m_shape[1] = {experts};
  check_contiguous_shape(masked_m, "masked_m", m_shape, 1);
  check_same_device(masked_m, "masked_m", x, "x");
  check_device_tensor(q, "q");
  check_dtype(q, "q", {DType::e4m3, DType::i8});
  const int64_t q_shape[3] = {experts, m_max, hidden};
  check_contiguous_shape(q, "q", q_shape, 3);
  check_device_tensor(s, "s");
  check_dtype(s, "s", {DType::f32});
  const int64_t s_shape[2] = {experts, m_max};
  check_contiguous_shape(s, "s", s_shape, 2);
  check_no_overlap(q, "q", masked_m, "masked_m");
  check_no_overlap(s, "s", masked_m, "masked_m");
  FP8ROUTE_CHECK(experts * m_max <= 0x7FFFFFFF, "x: E * M_max = " << experts * m_max << " rows, at most 2^31-1");
  if (experts * m_max == 0) return;
  // The slabs as rows: x [E * M_max, 2H], q [E * M_max, H], s [E * M_max].
  const TensorView x2 = TensorView::contiguous(x.data, x.dtype, {experts * m_max, 2 * hidden}, x.device);
  const TensorView q2 = TensorView::contiguous(q.data, q.dtype, {experts * m_max, hidden}, q.device);
  const TensorView s2 = TensorView::contiguous(s.data, s.dtype, {experts * m_max}, s.device);
  token_quant(x2, q2, s2, rounding, true, stream, {static_cast<const int32_t*>(masked_m.data), m_max});
}

// scatter_per_token_quant: the per-token kernel with each token's codes and scale written to its
// destination rows (token_kernel.cuh, for_each_destination).
void scatter_token_quant(const TensorView& x, const TensorView& src2dst, const TensorView& q, const TensorView& s,
                         ScaleRounding rounding, cudaStream_t stream, bool unique_rows) {
  check_row_input(x);
  const int64_t tokens = x.size(0), hidden = x.size(1);
  check_device_tensor(src2dst, "src2dst");
  check_dtype(src2dst, "src2dst", {DType::i32});
  check_ndim(src2dst, "src2dst", 2, "[T, topk]");
  FP8ROUTE_CHECK(src2dst.size(0) == tokens && src2dst.size(1) >= 1 && src2dst.is_contiguous(),
                 "src2dst: expected contiguous [T=" << tokens << ", topk>=1], got " << to_string(src2dst));
  check_device_tensor(q, "q");
  check_dtype(q, "q", {DType::e4m3, DType::i8});
  check_ndim(q, "q", 2, "[rows, H]");
  const int64_t rows = q.size(0);
  const int64_t q_shape[2] = {rows, hidden};
  check_contiguous_shape(q, "q", q_shape, 2);
  check_device_tensor(s, "s");
  check_dtype(s, "s", {DType::f32});
  const int64_t s_shape[1] = {rows};
  check_contiguous_shape(s, "s", s_shape, 1);
  check_aligned(s.data, 4, "s");
  check_same_device(q, "q", x, "x");
  check_same_device(src2dst, "src2dst", x, "x");
  check_no_overlap(q, "q", x, "x");
  check_no_overlap(q, "q", src2dst, "src2dst");
  check_scale_operand(s, "s", true, x, q);
  check_no_overlap(s, "s", src2dst, "src2dst");
  FP8ROUTE_CHECK(rounding == ScaleRounding::none || rounding == ScaleRounding::pow2, "rounding: not none or pow2");
  // Entries t * topk + j and destination rows are numbered in int32, as src2dst's values are.
  FP8ROUTE_CHECK(src2dst.numel() <= 0x7FFFFFFF && rows <= 0x7FFFFFFF,
                 "src2dst, q: at most 2^31-1 entries and rows, got " << to_string(src2dst) << " and " << to_string(q));
  FP8ROUTE_CHECK(hidden <= 0x7FFFFFFF, "x: H = " << hidden << " must be < 2^31 (one row's elements are indexed in int32)");
  if (tokens == 0 || rows == 0) return;
  check_sm90();
  RowQuantParams p = row_params(x, q);
  p.s = static_cast<float*>(s.data);
  p.pow2 = rounding == ScaleRounding::pow2;
  p.src2dst = static_cast<const int32_t*>(src2dst.data);
  p.topk = static_cast<int32_t>(src2dst.size(1));
  p.dst_rows = static_cast<int32_t>(rows);
  p.unique_rows = unique_rows;
  if (!unique_rows && src2dst.numel() > kernels::kScatterScanEntries)
    p.owner = scatter_owners(src2dst, rows, stream, "scatter_per_token_quant");
  const LaunchShape grid_shape = pdl_shape(dim3(static_cast<unsigned>(tokens)), kernels::kRowThreads);
  dispatch_row(x.dtype, vector_rows(p, x.dtype), [&]<class InT, bool kAligned>() {
    launch_token_kernel<InT, false, kAligned, true>(p, grid_shape, stream);
    FP8ROUTE_CHECK_LAUNCH();
  });
}

}  // namespace

void scatter_per_token_quant(const TensorView& x, const TensorView& src2dst, const TensorView& q, const TensorView& s,
                             ScaleRounding rounding, cudaStream_t stream, bool unique_rows) {
  scatter_token_quant(x, src2dst, q, s, rounding, stream, unique_rows);
}

void per_token_quant(const TensorView& x, const TensorView& q, const TensorView& s,
                     ScaleRounding rounding, cudaStream_t stream) {
  token_quant(x, q, s, rounding, false, stream);
}

void silu_and_mul_per_token_quant(const TensorView& x, const TensorView& q, const TensorView& s,
                                  ScaleRounding rounding, cudaStream_t stream) {
  token_quant(x, q, s, rounding, true, stream);
}

void masked_silu_and_mul_per_token_quant(const TensorView& x, const TensorView& masked_m, const TensorView& q,
                                         const TensorView& s, ScaleRounding rounding, cudaStream_t stream) {
  masked_token_quant(x, masked_m, q, s, rounding, stream);
}

}  // namespace fp8route
