#pragma once
// Device code of RMSNorm and its fused quantization (docs/numerics.md, "RMSNorm"). Launchers:
// src/quant/norm.cu.
//
// One block per token row, the row held in registers: thread i takes the 8-element vectors
// i, i + blockDim.x, ... (kItems of them), so a group's vectors sit in adjacent lanes of one warp,
// as in the group-quant kernel. The steps, all on the row in registers:
//   h = x (+ residual, rounded to the input dtype and written to residual_out)
//   ss = sum of h^2 in double (each square is exact in double; the sum is order-independent unless
//        the squares span more than 2^(53 - 2p - log2 H), p the dtype's significand bits)
//   inv = float(1 / sqrt(ss / H + eps)) in double, correctly rounded at each step
//   y = dtype(fp32(fp32(h * inv) * w))      (the unfused rms_norm's output)
// then y is written (values), or quantized exactly as the standalone kernels quantize a tensor
// holding y: per 1xG group, per token, or by a static per-tensor scale. So fusing never changes a
// code or a scale.

#include "core/chain_trace.cuh"
#include "core/griddep.cuh"
#include "quant/common.cuh"

namespace fp8route::kernels {

enum class NormOut { values, group, token, tensor_static };

struct NormParams {
  const void* x;
  const void* residual;  // null: no residual add
  void* residual_out;    // written when residual is set (may be residual itself)
  const void* weight;    // [H]
  int64_t x_stride_t, r_stride_t, ro_stride_t;  // elements
  int32_t tokens, hidden, vecs;                 // vecs = H / kQuantVec
  float eps;
  void* out;  // values: [T, H] of the input dtype
  int64_t out_stride_t;
  uint8_t* q;  // codes [T, H], contiguous
  void* s;     // group: the quant_layout scales; token: f32 [T]
  int64_t s_stride_t, s_stride_c, t_pad;  // group scales, in 4-byte words / rows
  int32_t groups, group_lanes;            // group: H / G and G / kQuantVec
  const float* static_scale;              // tensor_static: device f32 [1]
  float qmax;
  bool int8, pow2, packed;
  bool weight_ready;  // weight not written by the previous kernel: loaded before griddepcontrol.wait
  FP8ROUTE_TRACE_FIELD
};

constexpr int kNormMaxThreads = 512;

template <class T>
__device__ __forceinline__ float round_to(float v) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) return __bfloat162float(__float2bfloat16_rn(v));
  else return __half2float(__float2half_rn(v));
}

// 8 values (already representable in T) stored as one 16-byte vector of T.
template <class T>
__device__ __forceinline__ void store_vec8(T* p, const float (&v)[kQuantVec]) {
  using Pair = typename HalfPair<T>::type;
  Pair w[kQuantVec / 2];
#pragma unroll
  for (int i = 0; i < kQuantVec / 2; ++i) {
    if constexpr (std::is_same_v<T, __nv_bfloat16>) w[i] = __floats2bfloat162_rn(v[2 * i], v[2 * i + 1]);
    else w[i] = __floats2half2_rn(v[2 * i], v[2 * i + 1]);
  }
  *reinterpret_cast<uint4*>(p) = *reinterpret_cast<const uint4*>(w);
}

template <class T, int kItems, NormOut kOut>
__global__ void __launch_bounds__(kNormMaxThreads) rms_norm_kernel(const NormParams p) {
  __shared__ double warp_sum[kNormMaxThreads / 32];
  __shared__ float warp_max[32];
  FP8ROUTE_TRACE_SCOPE(p.trace);
  // The next kernel may start its own independent prologue (a GEMM's weight prefetch) while this one
  // runs: its griddepcontrol.wait still waits for this grid's completion and memory flush.
  griddep_launch_dependents();
  const int t = blockIdx.x;
  const int tid = threadIdx.x;
  const int nthreads = blockDim.x;
  const T* x = static_cast<const T*>(p.x) + t * p.x_stride_t;
  const T* r = p.residual ? static_cast<const T*>(p.residual) + t * p.r_stride_t : nullptr;
  const T* w = static_cast<const T*>(p.weight);

  Raw8<T> xraw[kItems], rraw[kItems], wraw[kItems];
  const auto load_weight = [&] {
#pragma unroll
    for (int k = 0; k < kItems; ++k) {
      const int v = k * nthreads + tid;
      if (v < p.vecs) wraw[k] = load_raw8(w + v * kQuantVec);
    }
  };
  // x and residual may come from the previous kernel: read after the wait. The weight too, unless
  // the caller promised it was written before (weight_ready): then its loads overlap that kernel.
  if (p.weight_ready) load_weight();
  griddep_wait();
  FP8ROUTE_TRACE(trace_release(p.trace));
  if (!p.weight_ready) load_weight();
#pragma unroll
  for (int k = 0; k < kItems; ++k) {
    const int v = k * nthreads + tid;
    if (v < p.vecs) {
      xraw[k] = load_raw8(x + v * kQuantVec);
      if (r) rraw[k] = load_raw8(r + v * kQuantVec);
    }
  }

  float h[kItems][kQuantVec];
  double ss = 0.0;
#pragma unroll
  for (int k = 0; k < kItems; ++k) {
    const int v = k * nthreads + tid;
    if (v >= p.vecs) continue;
    to_float8(xraw[k], h[k]);
    if (r) {
      float rv[kQuantVec];
      to_float8(rraw[k], rv);
#pragma unroll
      for (int i = 0; i < kQuantVec; ++i) h[k][i] = round_to<T>(__fadd_rn(h[k][i], rv[i]));
      store_vec8(static_cast<T*>(p.residual_out) + t * p.ro_stride_t + v * kQuantVec, h[k]);
    }
#pragma unroll
    for (int i = 0; i < kQuantVec; ++i) {
      const double d = h[k][i];
      ss += d * d;  // exact product: a 16-bit float's square has at most 22 significant bits
    }
  }
  // The row's sum: a shuffle tree per warp, then the warps' sums in index order (the same order
  // in every thread, so every thread gets the same inv).
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, off);
  if (tid % 32 == 0) warp_sum[tid / 32] = ss;
  __syncthreads();
  double total = 0.0;
  for (int i = 0; i < nthreads / 32; ++i) total += warp_sum[i];
  const float inv = __double2float_rn(1.0 / sqrt(total / p.hidden + static_cast<double>(p.eps)));

  float amax[kItems];
#pragma unroll
  for (int k = 0; k < kItems; ++k) {
    const int v = k * nthreads + tid;
    amax[k] = 0.0f;
    if (v >= p.vecs) continue;
    float wv[kQuantVec];
    to_float8(wraw[k], wv);
#pragma unroll
    for (int i = 0; i < kQuantVec; ++i) h[k][i] = round_to<T>(__fmul_rn(__fmul_rn(h[k][i], inv), wv[i]));
    if constexpr (kOut == NormOut::values) store_vec8(static_cast<T*>(p.out) + t * p.out_stride_t + v * kQuantVec, h[k]);
    else if constexpr (kOut != NormOut::tensor_static) amax[k] = finite_amax(h[k]);
  }
  if constexpr (kOut == NormOut::values) return;

  uint8_t* q = p.q + static_cast<int64_t>(t) * p.hidden;
  if constexpr (kOut == NormOut::tensor_static) {
    const float scale = *p.static_scale;
#pragma unroll
    for (int k = 0; k < kItems; ++k) {
      const int v = k * nthreads + tid;
      if (v >= p.vecs) continue;
      float y[kQuantVec];
#pragma unroll
      for (int i = 0; i < kQuantVec; ++i) y[i] = __fdiv_rn(h[k][i], scale);
      *reinterpret_cast<uint2*>(q + v * kQuantVec) = encode(y, 1.0f, p.int8);
    }
    return;
  }

  if constexpr (kOut == NormOut::token) {
    float m = 0.0f;
#pragma unroll
    for (int k = 0; k < kItems; ++k) m = fmaxf(m, amax[k]);
    m = block_max(m, warp_max);
    const ScaleAndMultiplier sm = make_scale(m, p.qmax, p.pow2);
#pragma unroll
    for (int k = 0; k < kItems; ++k) {
      const int v = k * nthreads + tid;
      if (v < p.vecs) *reinterpret_cast<uint2*>(q + v * kQuantVec) = encode(h[k], sm.multiplier, p.int8);
    }
    if (tid == 0) static_cast<float*>(p.s)[t] = sm.scale;
    return;
  }

  // Groups: every lane of the warp takes part in the shuffles (lanes past the row with amax 0).
  const int lane = tid & (p.group_lanes - 1);
  uint32_t* s = static_cast<uint32_t*>(p.s);
#pragma unroll
  for (int k = 0; k < kItems; ++k) {
    float a = amax[k];
    for (int off = p.group_lanes >> 1; off > 0; off >>= 1) a = fmaxf(a, __shfl_xor_sync(0xffffffffu, a, off));
    const int v = k * nthreads + tid;
    if (v >= p.vecs) continue;
    const int c = v / p.group_lanes;
    const ScaleAndMultiplier sm = make_scale(a, p.qmax, p.pow2);
    *reinterpret_cast<uint2*>(q + v * kQuantVec) = encode(h[k], sm.multiplier, p.int8);
    if (lane != 0) continue;
    store_scale(s + t * p.s_stride_t, static_cast<uint32_t>(p.s_stride_c), p.groups, p.packed, c, sm);
    if (t == p.tokens - 1 && p.t_pad > p.tokens)  // layout rows past the last token
      zero_row_padding(s, p.s_stride_t, p.s_stride_c, p.packed, p.tokens, p.t_pad, c);
  }
}

}  // namespace fp8route::kernels
