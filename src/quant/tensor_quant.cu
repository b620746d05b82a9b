// Launchers of the per-tensor quantization, static and dynamic: argument checks, parameters, the
// choice of the dynamic form's launch shape, launch. Device code: tensor_kernel.cuh.

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>

#include "core/checks.h"
#include "fp8route/tuning/cuda_check.h"
#include "core/launch.h"
#include "core/workspace.h"
#include "fp8route/device.h"
#include "fp8route/quant.h"
#include "quant/launch_common.h"
#include "fp8route/tuning/quant_knobs.h"
#include "quant/tensor_kernel.cuh"

namespace fp8route {

using kernels::RowQuantParams;
using namespace quant_launch;

namespace {

// Largest tensor (in 8-element vectors) the dynamic per-tensor quant runs as one cluster launch
// (smaller ones may take the one-block path first; larger ones, two launches).
// detail::set_tensor_cluster_max_vecs lets the benchmark move it.
int64_t g_cluster_max_vecs = 4096;

void check_scalar_f32(const TensorView& t, const char* name) {
  check_device_tensor(t, name);
  check_dtype(t, name, {DType::f32});
  FP8ROUTE_CHECK(t.numel() == 1, name << ": expected one f32 element, got " << to_string(t));
  check_aligned(t.data, 4, name);
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

// Enough blocks to fill the GPU for the grid-stride per-tensor kernels, never more than the work.
unsigned tensor_blocks(const RowQuantParams& p) {
  const int64_t vecs = row_vectors(p);
  const int64_t want = (vecs + kernels::kRowThreads - 1) / kernels::kRowThreads;
  const int64_t cap = static_cast<int64_t>(device_info(-1).sm_count) * 8;
  return static_cast<unsigned>(std::max<int64_t>(1, std::min(want, cap)));
}

}  // namespace

namespace detail {
void set_tensor_cluster_max_vecs(int64_t vecs) {
  FP8ROUTE_CHECK(vecs >= 0, "vecs: must be >= 0, got " << vecs);
  g_cluster_max_vecs = vecs;
}
int64_t tensor_cluster_max_vecs() { return g_cluster_max_vecs; }
}  // namespace detail

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

void tensor_dynamic_one_block(RowQuantParams p, int64_t numel, DType x_dtype, bool aligned, cudaStream_t stream) {
  p.rows = 1;
  p.hidden = p.x_stride_t = numel;
  launch_token_rows(p, x_dtype, aligned, pdl_shape(dim3(1), kernels::kRowThreads), stream);
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

// The launch shape by size: the one-block path is faster than the cluster below its limit, the
// cluster faster than two launches up to ~4096 vectors (g_cluster_max_vecs; docs/design.md, "Measurements behind the rules").
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
      tensor_dynamic_one_block(p, x.numel(), x.dtype, kAligned, stream);
    else if (x.size(0) > 0 && vecs <= std::min(kClusterCapacity, g_cluster_max_vecs))
      tensor_dynamic_cluster<InT, kAligned>(p, vecs, stream);
    else
      tensor_dynamic_two_launches<InT, kAligned>(p, stream);  // also an empty x: the scale of amax 0
  });
}

}  // namespace fp8route
