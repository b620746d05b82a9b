// Launchers of the per-token-group quantization (plain, fused silu_and_mul, masked, scatter):
// argument checks, parameters, dispatch, launch. Device code: group_kernel.cuh.

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>

#include "core/checks.h"
#include "fp8route/tuning/cuda_check.h"
#include "core/launch.h"
#include "core/workspace.h"
#include "fp8route/device.h"
#include "fp8route/quant.h"
#include "quant/group_kernel.cuh"
#include "quant/launch_common.h"
#include "fp8route/tuning/quant_knobs.h"

namespace fp8route::kernels {

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
using quant_launch::check_sm90;
using quant_launch::dispatch_float;
using quant_launch::pdl_shape;

namespace {

// Items per thread: 4 (bytes in flight) once the launch has more vectors than the GPU has
// threads to give them, else 1 (shorter chains over more blocks). FP8ROUTE's benchmark can force
// either (detail::force_group_items) to re-measure this rule.
int g_force_items = 0;
// Threads per block of the group kernel, at most (0: kGroupThreads). Fewer spread a decode call
// over more SMs; detail::force_group_threads lets the benchmark measure that.
int g_group_threads = 0;
// Elements per lane of decode-sized plain launches (0: the rule below; detail::force_group_vec).
int g_force_vec = 0;

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
// UE8M0 scales; else the general kernel. Past those sizes the decode kernel's shorter chain per lane
// no longer sets the time and the general kernel is level or ahead; with packed UE8M0 scales that
// comes sooner, probably because four of its warps write the bytes of one scale word (two in the
// general kernel). Blocks of 64 threads are slower at every size. Figures: docs/design.md, "Measurements behind the rules".
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

}  // namespace

// Which entry writes each scatter destination row: owner[d] = the largest t * topk + j with
// src2dst[t, j] = d, so that a row several entries name gets one token's codes and scales, never a
// mix of two (the kernels of different tokens would otherwise race on it). Scratch of the stream,
// or of the graph being captured (core/workspace.h), reset and filled on `stream` before the quant
// kernel reads it.
const int32_t* quant_launch::scatter_owners(const TensorView& src2dst, int64_t rows, cudaStream_t stream,
                                            const char* what) {
  int dev = 0;
  FP8ROUTE_CUDA_CHECK(cudaGetDevice(&dev));
  static Workspaces owners{"scatter row-owner buffer"};
  auto* owner = static_cast<int32_t*>(owners.get(dev, static_cast<size_t>(rows) * 4, stream, what));
  FP8ROUTE_CUDA_CHECK(cudaMemsetAsync(owner, 0xFF, static_cast<size_t>(rows) * 4, stream));  // -1: no entry yet
  const int64_t entries = src2dst.numel();
  const int64_t blocks = std::min<int64_t>((entries + kernels::kOwnerThreads - 1) / kernels::kOwnerThreads,
                                           int64_t{device_info(-1).sm_count} * 4);
  kernels::scatter_owner_kernel<<<static_cast<unsigned>(blocks), kernels::kOwnerThreads, 0, stream>>>(
      static_cast<const int32_t*>(src2dst.data), static_cast<int32_t>(entries), static_cast<int32_t>(rows), owner);
  FP8ROUTE_CHECK_LAUNCH();
  return owner;
}

namespace {

// The one entry of the group family: checks everything, then launches.
void group_quant(const TensorView& x, const TensorView* masked_m, const TensorView* src2dst,
                 const GroupQuantSpec& spec, const TensorView& q, const TensorView& s, bool fused,
                 Form form, cudaStream_t stream, bool unique_rows = false) {
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
  if (form == Form::scatter && !unique_rows)
    p.owner = quant_launch::scatter_owners(*src2dst, layout_tokens, stream, "scatter_per_token_group_quant");
  dispatch_float(x.dtype, [&]<class InT>() {
    if (fused) launch_group_size<InT, true>(spec.group_size, p, rows, stream);
    else launch_group_size<InT, false>(spec.group_size, p, rows, stream);
  });
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
                                   const TensorView& s, cudaStream_t stream, bool unique_rows) {
  group_quant(x, nullptr, &src2dst, spec, q, s, false, Form::scatter, stream, unique_rows);
}

}  // namespace fp8route
