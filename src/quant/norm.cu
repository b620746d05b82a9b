// Launchers of RMSNorm and its fused quantization: argument checks, parameters, dispatch, launch.
// Device code: src/quant/norm_kernel.cuh.

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>

#include "fp8route/tuning/chain_trace.h"
#include "core/checks.h"
#include "fp8route/tuning/cuda_check.h"
#include "core/launch.h"
#include "fp8route/device.h"
#include "fp8route/norm.h"
#include "quant/norm_kernel.cuh"

namespace fp8route {

using detail::check_aligned;
using detail::check_contiguous_shape;
using detail::check_device_tensor;
using detail::check_dtype;
using detail::check_ndim;
using detail::check_no_overlap;
using detail::check_same_device;
using detail::given;
using kernels::NormOut;
using kernels::NormParams;

namespace {

// Same pointer, shape and strides: the one overlap the in-place forms allow.
bool same_view(const TensorView& a, const TensorView& b) {
  return a.data == b.data && a.ndim == b.ndim && a.shape == b.shape && a.strides == b.strides;
}

// A [T, H] operand of x's dtype whose rows the kernel reads or writes as 16-byte vectors.
void check_rows(const TensorView& t, const char* name, const TensorView& x) {
  check_device_tensor(t, name);
  check_same_device(t, name, x, "x");
  FP8ROUTE_CHECK(t.dtype == x.dtype, name << ": dtype " << dtype_name(t.dtype) << " must be x's ("
                                          << dtype_name(x.dtype) << ")");
  check_ndim(t, name, 2, "[T, H]");
  FP8ROUTE_CHECK(t.size(0) == x.size(0) && t.size(1) == x.size(1),
                 name << ": expected shape [" << x.size(0) << "," << x.size(1) << "], got " << to_string(t));
  FP8ROUTE_CHECK(t.stride(1) == 1, name << ": last dim must be contiguous (stride 1), got " << to_string(t));
  FP8ROUTE_CHECK(t.size(0) <= 1 || (t.stride(0) >= t.size(1) && t.stride(0) % 8 == 0),
                 name << ": row stride must be >= H and a multiple of 16 bytes, got " << to_string(t));
  check_aligned(t.data, 16, name);
}

// Checks the input side and returns the kernel's parameters for it.
NormParams input_params(const RmsNormInput& in) {
  const TensorView& x = in.x;
  check_device_tensor(x, "x");
  check_dtype(x, "x", {DType::bf16, DType::f16});
  check_ndim(x, "x", 2, "[T, H]");
  const int64_t tokens = x.size(0), hidden = x.size(1);
  FP8ROUTE_CHECK(hidden > 0 && hidden % 8 == 0 && hidden <= kRmsNormMaxHidden,
                 "x: H = " << hidden << " must be a positive multiple of 8, at most " << kRmsNormMaxHidden);
  FP8ROUTE_CHECK(tokens <= 0x7FFFFFFF, "x: at most 2^31-1 rows, got " << tokens);
  check_rows(x, "x", x);
  check_device_tensor(in.weight, "weight");
  check_same_device(in.weight, "weight", x, "x");
  FP8ROUTE_CHECK(in.weight.dtype == x.dtype, "weight: dtype " << dtype_name(in.weight.dtype) << " must be x's ("
                                                              << dtype_name(x.dtype) << ")");
  const int64_t wshape[1] = {hidden};
  check_contiguous_shape(in.weight, "weight", wshape, 1);
  check_aligned(in.weight.data, 16, "weight");
  FP8ROUTE_CHECK(std::isfinite(in.eps) && in.eps >= 0.0f, "eps: must be finite and >= 0, got " << in.eps);
  const bool residual = given(in.residual);
  FP8ROUTE_CHECK(residual == given(in.residual_out),
                 (residual ? "residual_out: required with residual" : "residual_out: given without residual"));
  if (residual) {
    check_rows(in.residual, "residual", x);
    check_rows(in.residual_out, "residual_out", x);
    if (!same_view(in.residual_out, in.residual)) check_no_overlap(in.residual_out, "residual_out", in.residual, "residual");
    check_no_overlap(in.residual_out, "residual_out", x, "x");
    check_no_overlap(in.residual_out, "residual_out", in.weight, "weight");
  }
  NormParams p{};
  p.x = x.data;
  p.x_stride_t = x.stride(0);
  p.residual = residual ? in.residual.data : nullptr;
  p.r_stride_t = residual ? in.residual.stride(0) : 0;
  p.residual_out = residual ? in.residual_out.data : nullptr;
  p.ro_stride_t = residual ? in.residual_out.stride(0) : 0;
  p.weight = in.weight.data;
  p.tokens = static_cast<int32_t>(tokens);
  p.hidden = static_cast<int32_t>(hidden);
  p.vecs = static_cast<int32_t>(hidden / kernels::kQuantVec);
  p.eps = in.eps;
  p.weight_ready = in.static_weight;
  return p;
}

// An output must not overlap any input, nor residual_out; `may_be_x`: it may be x itself (in place).
void check_output(const TensorView& out, const char* name, const RmsNormInput& in, bool may_be_x = false) {
  check_same_device(out, name, in.x, "x");
  if (!(may_be_x && same_view(out, in.x))) check_no_overlap(out, name, in.x, "x");
  check_no_overlap(out, name, in.weight, "weight");
  if (given(in.residual)) {
    check_no_overlap(out, name, in.residual, "residual");
    check_no_overlap(out, name, in.residual_out, "residual_out");
  }
}

void check_sm90() { detail::check_sm90_device("RMSNorm kernels"); }

// One block per row of at most kNormMaxThreads threads (whole warps) holding kItems vectors each:
// the fewest items that fit, so a decode row is one short chain per thread.
template <class T, NormOut kOut>
void launch_items(const NormParams& params, cudaStream_t stream) {
  const int per_block = kernels::kNormMaxThreads;
  const int items = params.vecs <= per_block ? 1 : params.vecs <= 2 * per_block ? 2 : params.vecs <= 4 * per_block ? 4 : 8;
  const int threads = ((params.vecs + items - 1) / items + 31) / 32 * 32;
  const LaunchShape shape{dim3(static_cast<unsigned>(params.tokens)), dim3(static_cast<unsigned>(threads)), 0,
                          dim3(0, 0, 0), true};
  NormParams p = params;
  FP8ROUTE_TRACE(constexpr const char* kName[] = {"rms_norm", "rms_norm+group_quant", "rms_norm+token_quant",
                                                   "rms_norm+tensor_quant"};
                 p.trace = chain_trace::next(kName[static_cast<int>(kOut)], shape.grid, shape.block, 0);)
  switch (items) {
    case 1: return launch_kernel(kernels::rms_norm_kernel<T, 1, kOut>, shape, stream, p);
    case 2: return launch_kernel(kernels::rms_norm_kernel<T, 2, kOut>, shape, stream, p);
    case 4: return launch_kernel(kernels::rms_norm_kernel<T, 4, kOut>, shape, stream, p);
    default: return launch_kernel(kernels::rms_norm_kernel<T, 8, kOut>, shape, stream, p);
  }
}

template <NormOut kOut>
void launch(const RmsNormInput& in, const NormParams& p, cudaStream_t stream) {
  if (p.tokens == 0) return;
  check_sm90();
  static_assert(kRmsNormMaxHidden / kernels::kQuantVec <= 8 * kernels::kNormMaxThreads, "the widest row fits");
  if (in.x.dtype == DType::bf16) launch_items<__nv_bfloat16, kOut>(p, stream);
  else launch_items<__half, kOut>(p, stream);
}

// q [T, H] of e4m3 or i8, contiguous, 16-byte aligned.
void check_codes(const TensorView& q, const RmsNormInput& in) {
  check_device_tensor(q, "q");
  check_dtype(q, "q", {DType::e4m3, DType::i8});
  const int64_t shape[2] = {in.x.size(0), in.x.size(1)};
  check_contiguous_shape(q, "q", shape, 2);
  check_aligned(q.data, 16, "q");
  check_output(q, "q", in);
}

}  // namespace

void rms_norm(const RmsNormInput& in, const TensorView& out, cudaStream_t stream) {
  NormParams p = input_params(in);
  check_rows(out, "out", in.x);
  check_output(out, "out", in, true);
  p.out = out.data;
  p.out_stride_t = out.stride(0);
  launch<NormOut::values>(in, p, stream);
}

void rms_norm_per_token_group_quant(const RmsNormInput& in, const GroupQuantSpec& spec, const TensorView& q,
                                    const TensorView& s, cudaStream_t stream) {
  validate(spec);
  NormParams p = input_params(in);
  FP8ROUTE_CHECK(p.hidden % spec.group_size == 0,
                 "x: H = " << p.hidden << " is not divisible by group_size " << spec.group_size);
  const QuantLayout L = quant_layout(spec, p.tokens, p.hidden);
  check_codes(q, in);
  FP8ROUTE_CHECK(q.dtype == spec.code, "q: dtype " << dtype_name(q.dtype) << " does not match the spec's code "
                                                   << dtype_name(spec.code));
  check_device_tensor(s, "s");
  FP8ROUTE_CHECK(s.dtype == L.scale_dtype, "s: dtype " << dtype_name(s.dtype) << " but " << name(spec.storage)
                                                       << " storage needs " << dtype_name(L.scale_dtype));
  check_contiguous_shape(s, "s", L.scale_shape, L.scale_ndim);
  check_aligned(s.data, spec.layout == ScaleLayout::col_major_tma ? 16 : 4, "s");
  check_output(s, "s", in);
  check_no_overlap(q, "q", s, "s");
  FP8ROUTE_CHECK(L.scale_batch_stride < (int64_t{1} << 32) || p.tokens == 0,
                 "s: " << L.scale_elems << " scale words do not fit the kernel's 32-bit word offsets");
  p.q = static_cast<uint8_t*>(q.data);
  p.s = s.data;
  p.s_stride_t = L.scale_stride_t;
  p.s_stride_c = L.scale_stride_c;
  p.t_pad = L.t_pad;
  p.groups = static_cast<int32_t>(L.groups);
  p.group_lanes = spec.group_size / kernels::kQuantVec;
  p.qmax = code_qmax(spec.code);
  p.int8 = spec.code == DType::i8;
  p.pow2 = spec.rounding == ScaleRounding::pow2;
  p.packed = spec.storage == ScaleStorage::ue8m0_packed;
  launch<NormOut::group>(in, p, stream);
}

void rms_norm_per_token_quant(const RmsNormInput& in, const TensorView& q, const TensorView& s,
                              ScaleRounding rounding, cudaStream_t stream) {
  NormParams p = input_params(in);
  check_codes(q, in);
  check_device_tensor(s, "s");
  check_dtype(s, "s", {DType::f32});
  const int64_t sshape[1] = {p.tokens};
  check_contiguous_shape(s, "s", sshape, 1);
  check_aligned(s.data, 4, "s");
  check_output(s, "s", in);
  check_no_overlap(q, "q", s, "s");
  FP8ROUTE_CHECK(rounding == ScaleRounding::none || rounding == ScaleRounding::pow2, "rounding: not none or pow2");
  p.q = static_cast<uint8_t*>(q.data);
  p.s = s.data;
  p.qmax = code_qmax(q.dtype);
  p.int8 = q.dtype == DType::i8;
  p.pow2 = rounding == ScaleRounding::pow2;
  launch<NormOut::token>(in, p, stream);
}

void rms_norm_per_tensor_quant_static(const RmsNormInput& in, const TensorView& scale, const TensorView& q,
                                      cudaStream_t stream) {
  NormParams p = input_params(in);
  check_codes(q, in);
  check_device_tensor(scale, "scale");
  check_same_device(scale, "scale", in.x, "x");
  check_dtype(scale, "scale", {DType::f32});
  const int64_t one[1] = {1};
  check_contiguous_shape(scale, "scale", one, 1);
  check_aligned(scale.data, 4, "scale");
  check_no_overlap(q, "q", scale, "scale");
  p.q = static_cast<uint8_t*>(q.data);
  p.static_scale = static_cast<const float*>(scale.data);
  p.qmax = code_qmax(q.dtype);
  p.int8 = q.dtype == DType::i8;
  launch<NormOut::tensor_static>(in, p, stream);
}

}  // namespace fp8route
