// Launchers of the quantization family: argument checks, parameters, dispatch, launch.
// Device code: src/quant/kernel.cuh.

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <bit>
#include <cstdint>

#include "core/checks.h"
#include "core/launch.h"
#include "core/cuda_check.h"
#include "core/workspace.h"
#include "fp8route/device.h"
#include "quant/kernel.cuh"
#include "fp8route/quant.h"
#include "quant/quant_internal.h"

namespace fp8route::kernels {

// Non-template kernels live here, not in kernel.cuh: that header is included by more than one
// translation unit.
// Scatter: owner[d] = the largest entry i = t * topk + j with src2dst[i] = d, over owner preset to
// -1, so that a destination row several entries name is written by exactly one of them.
constexpr int kOwnerThreads = 256;
__global__ void __launch_bounds__(kOwnerThreads) scatter_owner_kernel(const int32_t* src2dst, int32_t entries, int32_t rows,
                                                            int32_t* owner) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < entries;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int32_t d = src2dst[i];
    if (d >= 0 && d < rows) atomicMax(owner + d, static_cast<int32_t>(i));
  }
}

// Test support: counts the floats a in [first, end) (bit patterns) where the scale divisions of
// make_scale differ from __fdiv_rn (GroupQuantGpu.ScaleDivisionsExactOverTheWholeRange).
__global__ void scale_division_mismatch_kernel(float qmax, uint32_t first, uint32_t end,
                                               unsigned long long* mismatches) {
  unsigned long long bad = 0;
  for (uint64_t b = first + static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; b < end;
       b += static_cast<uint64_t>(gridDim.x) * blockDim.x) {
    const float a = __uint_as_float(static_cast<uint32_t>(b));
    bad += __float_as_uint(qmax_div(qmax, a)) != __float_as_uint(__fdiv_rn(qmax, a));
    bad += __float_as_uint(div_by_qmax(a, qmax)) != __float_as_uint(__fdiv_rn(a, qmax));
  }
  if (bad) atomicAdd(mismatches, bad);
}

}  // namespace fp8route::kernels

namespace fp8route {

using detail::check_aligned;
using detail::check_contiguous_shape;
using detail::check_device_tensor;
using detail::check_dtype;
using detail::check_ndim;
using detail::check_no_overlap;
using detail::check_same_device;
using kernels::GroupQuantParams;
using kernels::RowQuantParams;

static_assert(kernels::kAmaxFloorDevice == kAmaxFloor, "device and host amax floors must agree");

namespace {

void check_sm90() { detail::check_sm90_device("quantization kernels"); }

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

// Items per thread: 4 (bytes in flight) once the launch has more vectors than the GPU has
// threads to give them, else 1 (shorter chains over more blocks). FP8ROUTE's benchmark can force
// either (detail::force_group_items) to re-measure this rule.
int g_force_items = 0;
// Threads per block of the group kernel, at most (0: kGroupThreads). Fewer spread a decode call
// over more SMs; detail::force_group_threads lets the benchmark measure that.
int g_group_threads = 0;
// Elements per lane of decode-sized plain launches (0: the rule below; detail::force_group_vec).
int g_force_vec = 0;
// Largest tensor (in 8-element vectors) the dynamic per-tensor quant runs as one cluster launch
// (smaller ones may take the one-block path first; larger ones, two launches). detail::set_tensor_cluster_max_vecs lets the benchmark move it.
int64_t g_cluster_max_vecs = 4096;

// Every quant kernel is launched with programmatic dependent launch (core/launch.h): it may start
// while the previous kernel finishes and waits (griddep_wait) before its first read.
LaunchShape pdl_shape(dim3 grid, dim3 block) { return LaunchShape{grid, block, 0, dim3(0, 0, 0), true}; }

int group_items(int64_t rows, int64_t vecs_per_row) {
  if (g_force_items) return g_force_items;
  const int64_t resident_threads = static_cast<int64_t>(device_info(-1).sm_count) * 2048;
  return rows * vecs_per_row > 2 * resident_threads ? 4 : 1;
}

// One [T, H] (no experts, masked_m or src2dst).
bool plain_launch(const GroupQuantParams& p) { return p.experts == 1 && !p.masked_m && !p.src2dst; }

// The kernels' encoding: the two E4M3 ones with code of their own, else generic.
kernels::GroupEnc group_enc(const GroupQuantParams& p) {
  if (p.int8) return kernels::GroupEnc::generic;
  if (!p.pow2 && !p.packed) return kernels::GroupEnc::e4m3_f32;
  if (p.pow2 && p.packed) return kernels::GroupEnc::e4m3_ue8m0;
  return kernels::GroupEnc::generic;
}

// A row of `per_thread` lanes split into chunks of at most `threads` (blockIdx.y / .x), each
// blockDim.x = tpr lanes, a multiple of `unit`.
struct RowChunks {
  int64_t chunks;
  int tpr;
};
RowChunks row_chunks(int64_t per_thread, int threads, int unit) {
  const int64_t chunks = (per_thread + threads - 1) / threads;
  return {chunks, static_cast<int>(((per_thread + chunks - 1) / chunks + unit - 1) / unit * unit)};
}

// The decode kernel (kernels::group_quant_decode_kernel) for plain one-item launches of the two
// E4M3 encodings while the launch has at most 2048 lanes (of 4 elements) per SM, 128 with packed
// UE8M0 scales; else the general kernel. Measured on the H200 (bench/results/2026-11-30-quant-v4-h200,
// general kernel -> decode kernel): T = 1, H = 4096: group 1.52 -> 1.36 us, fused silu 1.82 -> 1.48;
// it stays ahead to T = 256, H = 4096 (silu 3.60 -> 3.15, group 2.44 -> 2.41) and is level or behind
// past that (T = 256, H = 7168: group 3.06 -> 3.44). With packed UE8M0 scales it falls behind from
// T = 32, H = 4096 (1.83 -> 1.93 us), probably because four warps there write the bytes of one scale word
// (two in the general kernel; not profiled). Blocks of 64 threads were slower everywhere (1.43 us at T = 1).
bool use_decode_kernel(const GroupQuantParams& p, int64_t rows, bool fused) {
  const bool plain_fast = plain_launch(p) && group_enc(p) != kernels::GroupEnc::generic;
  const bool fits = rows <= 65535 && p.x_stride_t <= 0x7FFFFFFF && rows * p.hidden <= 0x7FFFFFFF;
  if (!plain_fast || !fits || group_items(rows, p.hidden / kernels::kQuantVec) != 1) return false;
  if (g_force_vec) return g_force_vec == kernels::kDecodeVec;
  const int64_t lanes = rows * p.hidden / kernels::kDecodeVec;
  const int64_t per_sm = fused || !p.packed ? 2048 : 128;
  return lanes <= device_info(-1).sm_count * per_sm;
}

// Grid (chunks, T): a block takes a chunk of one row, blockDim.x lanes, a multiple of the warp and
// of the group's lanes.
static_assert(sizeof(kernels::DecodeQuantParams) == 56, "the decode kernel's parameters, as its comment says");

template <class InT, int kGroup, bool kFused>
void launch_group_decode(const GroupQuantParams& g, int64_t rows, cudaStream_t stream) {
  using kernels::GroupEnc;
  constexpr int kLanes = kernels::GroupTraits<kGroup, kernels::kDecodeVec>::kLanes;
  constexpr int kUnit = kLanes > 32 ? kLanes : 32;
  kernels::DecodeQuantParams p{};
  p.x = g.x;
  p.q = g.q;
  p.s = g.s;
  p.x_stride_t = static_cast<int32_t>(g.x_stride_t);
  p.hidden = static_cast<int32_t>(g.hidden);
  p.vecs = static_cast<int32_t>(g.hidden / kernels::kDecodeVec);
  p.tokens = static_cast<int32_t>(g.tokens);
  p.t_pad = static_cast<int32_t>(g.t_pad);
  p.groups = static_cast<int32_t>(g.groups);
  p.s_stride_t = static_cast<int32_t>(g.s_stride_t);
  p.s_stride_c = static_cast<int32_t>(g.s_stride_c);
  const auto [chunks, tpr] = row_chunks(p.vecs, g_group_threads ? g_group_threads : kernels::kGroupThreads, kUnit);
  const dim3 grid(static_cast<unsigned>(chunks), static_cast<unsigned>(rows));
  if (group_enc(g) == GroupEnc::e4m3_ue8m0)
    launch_kernel(kernels::group_quant_decode_kernel<InT, kGroup, kFused, GroupEnc::e4m3_ue8m0>, pdl_shape(grid, tpr), stream, p);
  else
    launch_kernel(kernels::group_quant_decode_kernel<InT, kGroup, kFused, GroupEnc::e4m3_f32>, pdl_shape(grid, tpr), stream, p);
  FP8ROUTE_CHECK_LAUNCH();
}

// Block shape: blockDim.x threads per row chunk (a multiple of the warp, chosen so chunks split
// the row evenly), blockDim.y rows; narrow rows pack several rows into a warp instead.
template <class InT, int kGroup, bool kFused, int kItems>
void launch_group(const GroupQuantParams& p, int64_t rows, cudaStream_t stream) {
  using kernels::GroupEnc;
  constexpr int kLanes = kernels::GroupTraits<kGroup>::kLanes;
  const int64_t vecs = p.hidden / kernels::kQuantVec;
  const int64_t per_thread = (vecs + kItems - 1) / kItems;
  const int threads = g_group_threads ? g_group_threads : kernels::kGroupThreads;
  int tpr, rows_per_block = 1;
  int64_t chunks = 1;
  if (per_thread >= 32) {
    const RowChunks rc = row_chunks(per_thread, threads, 32);
    chunks = rc.chunks;
    tpr = rc.tpr;
    rows_per_block = std::max(1, threads / tpr);
  } else {
    tpr = kLanes;  // a power of two dividing 32, so warps hold whole rows
    while (tpr < per_thread) tpr *= 2;
    rows_per_block = std::max(1, threads / tpr);
  }
  const int64_t blocks = (rows + rows_per_block - 1) / rows_per_block;
  FP8ROUTE_CHECK(blocks <= 0x7FFFFFFF && chunks <= 65535, "x: too many rows (" << rows << ") for one launch");
  const dim3 grid(static_cast<unsigned>(blocks), static_cast<unsigned>(chunks)), block(tpr, rows_per_block);
  const bool plain = plain_launch(p);
  auto launch = [&]<GroupEnc kEnc>() {
    if (plain) launch_kernel(kernels::group_quant_kernel<InT, kGroup, kFused, kItems, kEnc, true>, pdl_shape(grid, block), stream, p);
    else launch_kernel(kernels::group_quant_kernel<InT, kGroup, kFused, kItems, kEnc, false>, pdl_shape(grid, block), stream, p);
  };
  const GroupEnc enc = group_enc(p);
  if (enc == GroupEnc::e4m3_f32) launch.template operator()<GroupEnc::e4m3_f32>();
  else if (enc == GroupEnc::e4m3_ue8m0) launch.template operator()<GroupEnc::e4m3_ue8m0>();
  else
    launch_kernel(kernels::group_quant_kernel<InT, kGroup, kFused, kItems, GroupEnc::generic, false>, pdl_shape(grid, block), stream, p);
  FP8ROUTE_CHECK_LAUNCH();
}

template <class InT, int kGroup, bool kFused>
void launch_group_items(const GroupQuantParams& p, int64_t rows, cudaStream_t stream) {
  if (use_decode_kernel(p, rows, kFused)) launch_group_decode<InT, kGroup, kFused>(p, rows, stream);
  else if (group_items(rows, p.hidden / kernels::kQuantVec) == 4) launch_group<InT, kGroup, kFused, 4>(p, rows, stream);
  else launch_group<InT, kGroup, kFused, 1>(p, rows, stream);
}

template <class InT, bool kFused>
void launch_group_size(int group, const GroupQuantParams& p, int64_t rows, cudaStream_t stream) {
  switch (group) {
    case 16: return launch_group_items<InT, 16, kFused>(p, rows, stream);
    case 32: return launch_group_items<InT, 32, kFused>(p, rows, stream);
    case 64: return launch_group_items<InT, 64, kFused>(p, rows, stream);
    case 128: return launch_group_items<InT, 128, kFused>(p, rows, stream);
    case 256: return launch_group_items<InT, 256, kFused>(p, rows, stream);
  }
  FP8ROUTE_CHECK(false, "group_size: " << group << " has no kernel");
}

enum class Form { plain, masked, scatter };

// Layout rows [T, t_pad) of the scales, for a scatter with no tokens (no source row runs to zero
// them). They exist only in col_major_tma, where each column's rows are contiguous: a 2-D memset.
void zero_scale_padding(const QuantLayout& L, const TensorView& s, cudaStream_t stream) {
  if (L.t_pad == L.tokens || L.scale_cols == 0) return;
  char* first = static_cast<char*>(s.data) + L.tokens * 4;
  FP8ROUTE_CUDA_CHECK(cudaMemset2DAsync(first, static_cast<size_t>(L.scale_stride_c) * 4, 0,
                                        static_cast<size_t>(L.t_pad - L.tokens) * 4,
                                        static_cast<size_t>(L.scale_cols), stream));
}

// Which entry writes each scatter destination row: owner[d] = the largest t * topk + j with
// src2dst[t, j] = d, so that a row several entries name gets one token's codes and scales, never a
// mix of two (the kernels of different tokens would otherwise race on it). Scratch of the stream,
// or of the graph being captured (core/workspace.h), reset and filled on `stream` before the quant
// kernel reads it.
const int32_t* scatter_owners(const TensorView& src2dst, int64_t rows, cudaStream_t stream) {
  int dev = 0;
  FP8ROUTE_CUDA_CHECK(cudaGetDevice(&dev));
  static Workspaces owners{"scatter row-owner buffer"};
  auto* owner = static_cast<int32_t*>(
      owners.get(dev, static_cast<size_t>(rows) * 4, stream, "scatter_per_token_group_quant"));
  FP8ROUTE_CUDA_CHECK(cudaMemsetAsync(owner, 0xFF, static_cast<size_t>(rows) * 4, stream));  // -1: no entry yet
  const int64_t entries = src2dst.numel();
  const int64_t blocks = std::min<int64_t>((entries + kernels::kOwnerThreads - 1) / kernels::kOwnerThreads,
                                           int64_t{device_info(-1).sm_count} * 4);
  kernels::scatter_owner_kernel<<<static_cast<unsigned>(blocks), kernels::kOwnerThreads, 0, stream>>>(
      static_cast<const int32_t*>(src2dst.data), static_cast<int32_t>(entries), static_cast<int32_t>(rows), owner);
  FP8ROUTE_CHECK_LAUNCH();
  return owner;
}

// The one entry of the group family: checks everything, then launches.
void group_quant(const TensorView& x, const TensorView* masked_m, const TensorView* src2dst,
                 const GroupQuantSpec& spec, const TensorView& q, const TensorView& s, bool fused,
                 Form form, cudaStream_t stream) {
  validate(spec);
  check_device_tensor(x, "x");
  check_dtype(x, "x", {DType::bf16, DType::f16, DType::f32});
  const int x_dims = form == Form::masked ? 3 : 2;
  check_ndim(x, "x", x_dims, form == Form::masked ? "[E, T_pad, H]" : "[T, H]");
  FP8ROUTE_CHECK(x.stride(-1) == 1, "x: last dim must be contiguous (stride 1), got " << to_string(x));
  const int64_t in_cols = x.size(-1);
  FP8ROUTE_CHECK(!fused || in_cols % 2 == 0,
                 "x: the fused silu_and_mul form takes [.., 2 x hidden] ([gate | up]): its last dim must be even, got "
                     << in_cols);
  const int64_t hidden = fused ? in_cols / 2 : in_cols;
  FP8ROUTE_CHECK(hidden % spec.group_size == 0,
                 "x: hidden = " << hidden
                                << (fused ? " (half the last dim " + std::to_string(in_cols) + ": [gate | up])" : std::string())
                                << " must be a multiple of group_size " << spec.group_size);
  FP8ROUTE_CHECK(hidden > 0, "x: H must be > 0");
  const int esize = dtype_size(x.dtype);
  check_aligned(x.data, 16, "x");
  for (int d = 0; d < x_dims - 1; ++d)
    FP8ROUTE_CHECK(x.stride(d) % (16 / esize) == 0 && x.stride(d) >= (d == x_dims - 2 ? in_cols : 0),
                   "x: stride of dim " << d << " must be >= the row and a multiple of 16 bytes, got "
                                       << to_string(x));

  const int64_t experts = form == Form::masked ? x.size(0) : 0;
  const int64_t tokens = x.size(-2);
  int64_t layout_tokens = tokens;
  int topk = 0;
  if (form == Form::scatter) {
    check_device_tensor(*src2dst, "src2dst");
    check_dtype(*src2dst, "src2dst", {DType::i32});
    check_ndim(*src2dst, "src2dst", 2, "[T, topk]");
    FP8ROUTE_CHECK(src2dst->size(0) == tokens && src2dst->size(1) >= 1 && src2dst->is_contiguous(),
                   "src2dst: expected contiguous [T=" << tokens << ", topk>=1], got " << to_string(*src2dst));
    check_ndim(q, "q", 2, "[rows, H]");
    // Entries t * topk + j and destination rows are numbered in int32, as src2dst's values are.
    FP8ROUTE_CHECK(src2dst->numel() <= 0x7FFFFFFF && q.size(0) <= 0x7FFFFFFF,
                   "src2dst, q: at most 2^31-1 entries and rows, got " << to_string(*src2dst) << " and "
                                                                      << to_string(q));
    topk = static_cast<int>(src2dst->size(1));
    layout_tokens = q.size(0);
  }
  if (form == Form::masked) {
    check_device_tensor(*masked_m, "masked_m");
    check_dtype(*masked_m, "masked_m", {DType::i32});
    const int64_t shape[1] = {experts};
    check_contiguous_shape(*masked_m, "masked_m", shape, 1);
  }
  // The masked form is batched even with no experts (quant_layout's experts = 0 means unbatched):
  // then q and s are one expert's layout with the expert dim 0.
  QuantLayout L = quant_layout(spec, layout_tokens, hidden, form == Form::masked ? std::max<int64_t>(experts, 1) : 0);
  if (form == Form::masked && experts == 0) L.code_shape[0] = L.scale_shape[0] = 0;

  check_device_tensor(q, "q");
  FP8ROUTE_CHECK(q.dtype == spec.code, "q: dtype " << dtype_name(q.dtype) << " does not match the spec's code "
                                                   << dtype_name(spec.code));
  check_contiguous_shape(q, "q", L.code_shape, L.code_ndim);
  check_aligned(q.data, 16, "q");
  check_device_tensor(s, "s");
  FP8ROUTE_CHECK(s.dtype == L.scale_dtype, "s: dtype " << dtype_name(s.dtype) << " but " << name(spec.storage)
                                                       << " storage needs " << dtype_name(L.scale_dtype));
  check_contiguous_shape(s, "s", L.scale_shape, L.scale_ndim);
  check_aligned(s.data, spec.layout == ScaleLayout::col_major_tma ? 16 : 4, "s");
  const TensorView* index = masked_m ? masked_m : src2dst;
  const char* index_name = masked_m ? "masked_m" : "src2dst";
  for (const auto& [t, t_name] : {std::pair{&q, "q"}, std::pair{&s, "s"}, std::pair{index, index_name}})
    if (t) check_same_device(*t, t_name, x, "x");
  check_no_overlap(q, "q", s, "s");
  for (const auto& [out, out_name] : {std::pair{&q, "q"}, std::pair{&s, "s"}}) {
    check_no_overlap(*out, out_name, x, "x");
    if (index) check_no_overlap(*out, out_name, *index, index_name);
  }
  // The kernel indexes one row's elements and one expert's scale words with 32 bits.
  FP8ROUTE_CHECK(in_cols <= 0x7FFFFFFF && L.scale_batch_stride < (int64_t{1} << 32),
                 "x: too large for one launch ([.., " << in_cols << "] with " << L.scale_batch_stride
                                                      << " scale words per expert)");

  GroupQuantParams p{};
  p.x = x.data;
  p.x_stride_e = form == Form::masked ? x.stride(0) : 0;
  p.x_stride_t = x.stride(-2);
  p.experts = form == Form::masked ? experts : 1;
  p.tokens = tokens;
  p.hidden = hidden;
  p.groups = L.groups;
  p.vecs = static_cast<int>(hidden / kernels::kQuantVec);
  p.masked_m = masked_m ? static_cast<const int32_t*>(masked_m->data) : nullptr;
  p.src2dst = src2dst ? static_cast<const int32_t*>(src2dst->data) : nullptr;
  p.topk = topk;
  p.dst_rows = form == Form::scatter ? layout_tokens : 0;
  p.q = static_cast<uint8_t*>(q.data);
  p.q_stride_e = tokens * hidden;
  p.s = s.data;
  p.s_stride_e = L.scale_batch_stride;
  p.s_stride_t = L.scale_stride_t;
  p.s_stride_c = L.scale_stride_c;
  p.t_pad = L.t_pad;
  p.qmax = code_qmax(spec.code);
  p.int8 = spec.code == DType::i8;
  p.pow2 = spec.rounding == ScaleRounding::pow2;
  p.packed = spec.storage == ScaleStorage::ue8m0_packed;

  const int64_t rows = p.experts * tokens;
  if (form == Form::scatter) {
    if (layout_tokens == 0) return;  // nothing to write, no padding
    if (rows == 0) return zero_scale_padding(L, s, stream);
  }
  if (rows == 0) return;
  check_sm90();
  if (form == Form::scatter) p.owner = scatter_owners(*src2dst, layout_tokens, stream);
  dispatch_float(x.dtype, [&]<class InT>() {
    if (fused) launch_group_size<InT, true>(spec.group_size, p, rows, stream);
    else launch_group_size<InT, false>(spec.group_size, p, rows, stream);
  });
}

// x [T, H] of the per-token and per-tensor ops: any H >= 1, any row stride >= H, a pointer aligned
// to its element (the kernels pick their vector or any-width form by the layout: vector_rows).
void check_row_input(const TensorView& x) {
  check_device_tensor(x, "x");
  check_dtype(x, "x", {DType::bf16, DType::f16, DType::f32});
  check_ndim(x, "x", 2, "[T, H]");
  FP8ROUTE_CHECK(x.stride(1) == 1, "x: last dim must be contiguous (stride 1), got " << to_string(x));
  FP8ROUTE_CHECK(x.size(1) > 0, "x: H = " << x.size(1) << " must be positive");
  check_aligned(x.data, dtype_size(x.dtype), "x");
  FP8ROUTE_CHECK(x.stride(0) >= x.size(1), "x: row stride must be >= H, got " << to_string(x));
}

// q [T, H] beside x; H = x's last dim unless given (the fused form's x is [T, 2H]).
void check_codes(const TensorView& q, const TensorView& x, int64_t hidden = -1) {
  check_device_tensor(q, "q");
  check_dtype(q, "q", {DType::e4m3, DType::i8});
  const int64_t shape[2] = {x.size(0), hidden < 0 ? x.size(1) : hidden};
  check_contiguous_shape(q, "q", shape, 2);
  check_same_device(q, "q", x, "x");
  check_no_overlap(q, "q", x, "x");
}

// The scale tensor of a row or tensor quant (s or scale) beside x and q: one device; an output
// scale shares no byte with x or q, an input one none with q.
void check_scale_operand(const TensorView& t, const char* name, bool output, const TensorView& x, const TensorView& q) {
  check_same_device(t, name, x, "x");
  check_no_overlap(q, "q", t, name);
  if (output) check_no_overlap(t, name, x, "x");
}

void check_scalar_f32(const TensorView& t, const char* name) {
  check_device_tensor(t, name);
  check_dtype(t, name, {DType::f32});
  FP8ROUTE_CHECK(t.numel() == 1, name << ": expected one f32 element, got " << to_string(t));
  check_aligned(t.data, 4, name);
}

RowQuantParams row_params(const TensorView& x, const TensorView& q) {
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

// Whether the row kernels may take their vector form (kernel.cuh, "Rows of any width"): H a
// multiple of 8, every row of x 16-byte aligned (in the fused form the up half too, H elements into
// the row) and every row of q 8-byte aligned. Set p.hidden (the fused form's H) first.
bool vector_rows(const RowQuantParams& p, DType x_dtype) {
  const auto address = [](const void* a) { return reinterpret_cast<uintptr_t>(a); };
  return p.hidden % kernels::kQuantVec == 0 && address(p.x) % 16 == 0 && address(p.q) % 8 == 0 &&
         (p.rows <= 1 || p.x_stride_t * dtype_size(x_dtype) % 16 == 0);
}

// 8-element vectors of x, ceil(H / 8) per row.
int64_t row_vectors(const RowQuantParams& p) {
  return p.rows * ((p.hidden + kernels::kQuantVec - 1) / kernels::kQuantVec);
}

// The per-tensor ops' parameters. A contiguous x whose rows do not suit the vector form (H % 8 != 0)
// is one row of T * H elements to them (the codes are as contiguous as x), so that only the tensor's
// last vector is partial and the rest take the wide loads and stores where x and q are aligned.
RowQuantParams tensor_params(const TensorView& x, const TensorView& q) {
  RowQuantParams p = row_params(x, q);
  if (x.size(0) > 1 && x.stride(0) == x.size(1) && !vector_rows(p, x.dtype)) {
    p.rows = 1;
    p.hidden = p.x_stride_t = x.numel();
  }
  return p;
}

// The per-token kernel for rows of p.hidden elements, with the register vectors such a row needs
// (kernel.cuh, token_reg_vecs).
template <class InT, bool kFused, bool kAligned>
void launch_token_rows(const RowQuantParams& p, const LaunchShape& shape, cudaStream_t stream) {
  const int64_t vecs = (p.hidden + kernels::kQuantVec - 1) / kernels::kQuantVec;
  switch (kernels::token_reg_vecs(vecs)) {
    case 1: launch_kernel(kernels::per_token_quant_kernel<InT, kFused, kAligned, 1>, shape, stream, p); break;
    case 2: launch_kernel(kernels::per_token_quant_kernel<InT, kFused, kAligned, 2>, shape, stream, p); break;
    case 4: launch_kernel(kernels::per_token_quant_kernel<InT, kFused, kAligned, 4>, shape, stream, p); break;
    case 8: launch_kernel(kernels::per_token_quant_kernel<InT, kFused, kAligned, 8>, shape, stream, p); break;
    default: launch_kernel(kernels::per_token_quant_kernel<InT, kFused, kAligned, 0>, shape, stream, p); break;
  }
}

// Calls f.template operator()<CudaType, kAligned>() for the input dtype and the row kernels' form.
template <class F>
void dispatch_row(DType t, bool aligned, F&& f) {
  dispatch_float(t, [&]<class InT>() {
    if (aligned) f.template operator()<InT, true>();
    else f.template operator()<InT, false>();
  });
}

// Enough blocks to fill the GPU for the grid-stride per-tensor kernels, never more than the work.
unsigned tensor_blocks(const RowQuantParams& p) {
  const int64_t vecs = row_vectors(p);
  const int64_t want = (vecs + kernels::kRowThreads - 1) / kernels::kRowThreads;
  const int64_t cap = static_cast<int64_t>(device_info(-1).sm_count) * 8;
  return static_cast<unsigned>(std::max<int64_t>(1, std::min(want, cap)));
}

}  // namespace

namespace detail {
void force_group_items(int items) {
  FP8ROUTE_CHECK(items == 0 || items == 1 || items == 4, "items: 0 (automatic), 1 or 4, got " << items);
  g_force_items = items;
}

void force_group_vec(int vec) {
  FP8ROUTE_CHECK(vec == 0 || vec == kernels::kDecodeVec || vec == kernels::kQuantVec,
                 "vec: 0 (automatic), " << kernels::kDecodeVec << " (the decode kernel where it applies) or "
                                        << kernels::kQuantVec << ", got " << vec);
  g_force_vec = vec;
}

void force_group_threads(int threads) {
  FP8ROUTE_CHECK(threads == 0 || (threads >= 32 && threads <= kernels::kGroupThreads && threads % 32 == 0),
                 "threads: 0 (automatic) or a multiple of 32 in [32, " << kernels::kGroupThreads
                                                                        << "], got " << threads);
  g_group_threads = threads;
}

void set_tensor_cluster_max_vecs(int64_t vecs) {
  FP8ROUTE_CHECK(vecs >= 0, "vecs: must be >= 0, got " << vecs);
  g_cluster_max_vecs = vecs;
}
int64_t tensor_cluster_max_vecs() { return g_cluster_max_vecs; }

unsigned long long scale_division_mismatches(float qmax) {
  DeviceBuffer count(sizeof(unsigned long long));
  FP8ROUTE_CUDA_CHECK(cudaMemset(count.data(), 0, sizeof(unsigned long long)));
  kernels::scale_division_mismatch_kernel<<<device_info(-1).sm_count * 8, 256>>>(
      qmax, std::bit_cast<uint32_t>(kAmaxFloor), 0x7F800000u, static_cast<unsigned long long*>(count.data()));
  FP8ROUTE_CHECK_LAUNCH();
  unsigned long long n = 0;
  FP8ROUTE_CUDA_CHECK(cudaMemcpy(&n, count.data(), sizeof n, cudaMemcpyDeviceToHost));
  return n;
}
}  // namespace detail

GroupQuantOutputs allocate_group_quant_outputs(const GroupQuantSpec& spec, int64_t tokens,
                                               int64_t hidden, int64_t experts) {
  GroupQuantOutputs o;
  o.layout = quant_layout(spec, tokens, hidden, experts);
  const QuantLayout& L = o.layout;
  o.code_buffer = DeviceBuffer(static_cast<size_t>(std::max<int64_t>(L.code_bytes, 1)));
  o.scale_buffer = DeviceBuffer(static_cast<size_t>(std::max<int64_t>(L.scale_bytes, 4)));
  int dev = 0;
  FP8ROUTE_CUDA_CHECK(cudaGetDevice(&dev));
  auto view = [&](void* data, DType t, const int64_t* shape, const int64_t* strides, int nd) {
    TensorView v;
    v.data = data;
    v.dtype = t;
    v.ndim = nd;
    v.device = Device::cuda(dev);
    for (int i = 0; i < nd; ++i) {
      v.shape[i] = shape[i];
      v.strides[i] = strides[i];
    }
    return v;
  };
  o.q = view(o.code_buffer.data(), L.code_dtype, L.code_shape, L.code_strides, L.code_ndim);
  o.s = view(o.scale_buffer.data(), L.scale_dtype, L.scale_shape, L.scale_strides, L.scale_ndim);
  return o;
}

void per_token_group_quant(const TensorView& x, const GroupQuantSpec& spec, const TensorView& q,
                           const TensorView& s, cudaStream_t stream) {
  group_quant(x, nullptr, nullptr, spec, q, s, false, Form::plain, stream);
}

void silu_and_mul_per_token_group_quant(const TensorView& x, const GroupQuantSpec& spec,
                                        const TensorView& q, const TensorView& s,
                                        cudaStream_t stream) {
  group_quant(x, nullptr, nullptr, spec, q, s, true, Form::plain, stream);
}

void masked_per_token_group_quant(const TensorView& x, const TensorView& masked_m,
                                  const GroupQuantSpec& spec, const TensorView& q,
                                  const TensorView& s, cudaStream_t stream) {
  group_quant(x, &masked_m, nullptr, spec, q, s, false, Form::masked, stream);
}

void masked_silu_and_mul_per_token_group_quant(const TensorView& x, const TensorView& masked_m,
                                               const GroupQuantSpec& spec, const TensorView& q,
                                               const TensorView& s, cudaStream_t stream) {
  group_quant(x, &masked_m, nullptr, spec, q, s, true, Form::masked, stream);
}

void scatter_per_token_group_quant(const TensorView& x, const TensorView& src2dst,
                                   const GroupQuantSpec& spec, const TensorView& q,
                                   const TensorView& s, cudaStream_t stream) {
  group_quant(x, nullptr, &src2dst, spec, q, s, false, Form::scatter, stream);
}

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
    if (fused) launch_token_rows<InT, true, kAligned>(p, grid_shape, stream);
    else launch_token_rows<InT, false, kAligned>(p, grid_shape, stream);
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

void per_tensor_quant_static(const TensorView& x, const TensorView& scale, const TensorView& q,
                             cudaStream_t stream) {
  check_row_input(x);
  check_codes(q, x);
  check_scalar_f32(scale, "scale");
  check_scale_operand(scale, "scale", false, x, q);
  if (x.size(0) == 0) return;
  check_sm90();
  RowQuantParams p = tensor_params(x, q);
  p.static_scale = static_cast<const float*>(scale.data);
  dispatch_row(x.dtype, vector_rows(p, x.dtype), [&]<class InT, bool kAligned>() {
    launch_kernel(kernels::tensor_quant_kernel<InT, true, kAligned>, pdl_shape(dim3(tensor_blocks(p)), kernels::kRowThreads),
                  stream, p, static_cast<const float*>(nullptr));
    FP8ROUTE_CHECK_LAUNCH();
  });
}

namespace {

// The three launch shapes of the dynamic per-tensor quant (per_tensor_quant_dynamic picks one).

// The whole tensor (contiguous rows, at most kTensorOneBlockVecs vectors) as one row of the per-token
// kernel: one block, registers, one launch, the same arithmetic.
constexpr int64_t kTensorOneBlockVecs = 4 * kernels::kRowThreads;

template <class InT, bool kAligned>
void tensor_dynamic_one_block(RowQuantParams p, int64_t numel, cudaStream_t stream) {
  p.rows = 1;
  p.hidden = p.x_stride_t = numel;
  launch_token_rows<InT, false, kAligned>(p, pdl_shape(dim3(1), kernels::kRowThreads), stream);
  FP8ROUTE_CHECK_LAUNCH();
}

// One cluster launch and one read, the vectors spread over up to 8 blocks (one block would be
// instruction-bound: ~150 instructions per vector on one SM).
template <class InT, bool kAligned>
void tensor_dynamic_cluster(const RowQuantParams& p, int64_t vecs, cudaStream_t stream) {
  const int64_t blocks = std::min<int64_t>(kernels::kClusterMaxBlocks,
                                           (vecs + kernels::kClusterThreads - 1) / kernels::kClusterThreads);
  const int per_thread =
      static_cast<int>((vecs + blocks * kernels::kClusterThreads - 1) / (blocks * kernels::kClusterThreads));
  launch_kernel(kernels::tensor_quant_cluster_kernel<InT, kAligned>,
                LaunchShape{dim3(static_cast<unsigned>(blocks)), dim3(kernels::kClusterThreads), 0,
                            dim3(static_cast<unsigned>(blocks)), true},
                stream, p, per_thread);
}

// Two launches, the amax (its last block also writes the scale) and the codes, sharing a workspace
// that the amax kernel leaves zeroed for the next call: one per stream, or per graph under capture
// (core/workspace.h), so that graphs replayed at once never mix their amax, block count or
// multiplier.
template <class InT, bool kAligned>
void tensor_dynamic_two_launches(const RowQuantParams& p, cudaStream_t stream) {
  int dev = 0;
  FP8ROUTE_CUDA_CHECK(cudaGetDevice(&dev));
  static Workspaces workspaces{"per-tensor amax workspace", /*zero_new=*/true};
  auto* ws = static_cast<kernels::TensorAmaxWorkspace*>(
      workspaces.get(dev, sizeof(kernels::TensorAmaxWorkspace), stream, "per_tensor_quant_dynamic"));
  const unsigned blocks = tensor_blocks(p);
  launch_kernel(kernels::tensor_amax_kernel<InT, kAligned>, pdl_shape(dim3(blocks), kernels::kRowThreads), stream, p, ws);
  FP8ROUTE_CHECK_LAUNCH();
  if (p.rows > 0) {
    launch_kernel(kernels::tensor_quant_kernel<InT, false, kAligned>, pdl_shape(dim3(blocks), kernels::kRowThreads),
                  stream, p, static_cast<const float*>(&ws->multiplier));
    FP8ROUTE_CHECK_LAUNCH();
  }
}

}  // namespace

// Thresholds measured on the H200 (bench/results/2026-11-30-quant-v2-h200/run7_tensor_paths.txt):
// the cluster path beats two launches up to ~4096 vectors, the one-block path beats the cluster.
void per_tensor_quant_dynamic(const TensorView& x, const TensorView& q, const TensorView& scale,
                              cudaStream_t stream) {
  check_row_input(x);
  check_codes(q, x);
  check_scalar_f32(scale, "scale");
  check_scale_operand(scale, "scale", true, x, q);
  check_sm90();  // an empty x still has its scale written: amax 0, the floor's scale
  RowQuantParams p = tensor_params(x, q);
  p.s = static_cast<float*>(scale.data);
  const int64_t vecs = row_vectors(p);
  const bool contiguous = x.stride(0) == x.size(1);
  dispatch_row(x.dtype, vector_rows(p, x.dtype), [&]<class InT, bool kAligned>() {
    constexpr int64_t kClusterCapacity =
        int64_t{kernels::kClusterMaxBlocks} * kernels::kClusterThreads * kernels::kClusterVecs<InT>;
    if (x.size(0) > 0 && contiguous && vecs <= kTensorOneBlockVecs)
      tensor_dynamic_one_block<InT, kAligned>(p, x.numel(), stream);
    else if (x.size(0) > 0 && vecs <= std::min(kClusterCapacity, g_cluster_max_vecs))
      tensor_dynamic_cluster<InT, kAligned>(p, vecs, stream);
    else
      tensor_dynamic_two_launches<InT, kAligned>(p, stream);  // also an empty x: the scale of amax 0
  });
}

}  // namespace fp8route
