#pragma once
// Device code of the per-token quantization (launchers: token_quant.cu), also the per-tensor
// dynamic quant's one-block path.

#include <cstdint>

#include "core/griddep.cuh"
#include "quant/row_common.cuh"

namespace fp8route::kernels {

// One block per row: amax over the row, then its codes. A row of up to kRegVecs vectors per thread
// stays in registers (all loads in flight at once, the values computed once); kRegVecs is the
// smallest of 1, 2, 4, 8 that holds the row (token_reg_vecs), since registers held for vectors a
// row does not have cost occupancy, and with one block per row the bytes in flight per SM are
// blocks per SM x threads x loads per thread (a prefill row held in more registers than it needs
// leaves HBM short of loads; docs/design.md, "Measurements behind the rules"). kRegVecs = 0: wider rows (more
// than 16384 elements) are read again from L1/L2 for the codes.
constexpr int kTokenMaxRegVecs = 8;

// The register vectors per thread for a row of `vecs` 8-element vectors (0: the two-read form).
inline constexpr int token_reg_vecs(int64_t vecs) {
  for (int r = 1; r <= kTokenMaxRegVecs; r *= 2)
    if (vecs <= int64_t{r} * kRowThreads) return r;
  return 0;
}

// Scatter launches of at most this many entries (T * topk) find a destination row's owner by
// themselves (for_each_destination); larger ones are given an owner table (RowQuantParams::owner).
constexpr int64_t kScatterScanEntries = 4096;

// Calls store(d) for each destination row d = src2dst[t, j] in [0, dst_rows) that token t writes: a
// row several entries name is written by the last of them in (t, j) order only (the rule of
// scatter_per_token_group_quant), so that it gets one token's codes and scale, never a mix. Without
// an owner table the block scans the entries after (t, j) for the same row. Block-uniform: every
// thread makes the same calls.
template <class F>
__device__ __forceinline__ void for_each_destination(const RowQuantParams& p, int64_t t, F&& store) {
  const int64_t entries = p.rows * p.topk;
  for (int j = 0; j < p.topk; ++j) {
    const int64_t i = t * p.topk + j;
    const int32_t d = p.src2dst[i];
    if (d < 0 || d >= p.dst_rows) continue;
    bool later;
    if (p.unique_rows) {
      later = false;
    } else if (p.owner) {
      later = p.owner[d] != static_cast<int32_t>(i);
    } else {
      bool named = false;
      for (int64_t k = i + 1 + threadIdx.x; k < entries; k += blockDim.x) named |= p.src2dst[k] == d;
      later = __syncthreads_or(named);
    }
    if (!later) store(static_cast<int64_t>(d));
  }
}

// kFused: x rows are [gate (hidden) | up (hidden)] and the quantized values are silu(gate) * up in
// fp32 (the fused silu_and_mul of the group kernel).
// kAligned: see "Rows of any width" (row_common.cuh).
// kScatter: token t's codes and scale go to its destination rows (for_each_destination), not row t.
// kMasked: a row past its slab's count (RowQuantParams::masked_m) is skipped whole.
template <class InT, bool kFused, bool kAligned, int kRegVecs, bool kScatter = false, bool kMasked = false>
__global__ void __launch_bounds__(kRowThreads) per_token_quant_kernel(const RowQuantParams p) {
  FP8ROUTE_TRACE_SCOPE(p.trace);
  griddep_launch_dependents();  // PDL (core/griddep.cuh): everything below may read the previous kernel's output
  griddep_wait();
  FP8ROUTE_TRACE(trace_release(p.trace));
  __shared__ float smem[32];
  const int64_t t = blockIdx.x;
  if constexpr (kMasked) {  // block-uniform: the whole block leaves
    const int32_t n = p.masked_m[t / p.m_max];
    if (t % p.m_max >= min(max(n, 0), p.m_max)) return;
  }
  const InT* row = static_cast<const InT*>(p.x) + t * p.x_stride_t;
  const InT* up = kFused ? row + p.hidden : row;
  // Row r of the outputs gets the codes and scale (row t, or each destination of a scatter).
  auto write_rows = [&](auto&& store_row) {
    if constexpr (kScatter) for_each_destination(p, t, store_row);
    else store_row(t);
  };
  const int vecs = static_cast<int>(row_vecs<kAligned>(p.hidden));
  bool special = false;  // lane_values' NaN/inf flag (its return value is already the finite amax)
  if constexpr (kRegVecs > 0) {
    Raw8<InT> raw[kRegVecs], raw_up[kFused ? kRegVecs : 1];
#pragma unroll
    for (int k = 0; k < kRegVecs; ++k) {
      const int v = k * kRowThreads + threadIdx.x;
      if (v < vecs) {
        const int n = vec_width<kAligned>(p.hidden, v);
        raw[k] = load_row_vec<kAligned>(row + v * kQuantVec, n);
        if constexpr (kFused) raw_up[k] = load_row_vec<kAligned>(up + v * kQuantVec, n);
      }
    }
    // The values once (silu_and_mul is most of a decode row's instructions, on one SM), kept for
    // the codes.
    float amax = 0.0f;
    float x[kRegVecs][kQuantVec];
#pragma unroll
    for (int k = 0; k < kRegVecs; ++k) {
      if (k * kRowThreads + static_cast<int>(threadIdx.x) < vecs)
        amax = fmaxf(amax, lane_values<kFused>(raw[k], raw_up[kFused ? k : 0], x[k], special));
    }
    amax = block_max(amax, smem);
    const ScaleAndMultiplier sm = make_scale(amax, p.qmax, p.pow2);
    write_rows([&](int64_t r) {
      uint8_t* q = p.q + r * p.hidden;
#pragma unroll
      for (int k = 0; k < kRegVecs; ++k) {
        const int v = k * kRowThreads + threadIdx.x;
        if (v < vecs)
          store_row_codes<kAligned>(q + v * kQuantVec, encode(x[k], sm.multiplier, p.int8),
                                    vec_width<kAligned>(p.hidden, v));
      }
      if (threadIdx.x == 0) p.s[r] = sm.scale;
    });
  } else {
    // Vector v's values (read again for the codes from L1/L2); returns their finite amax.
    auto values = [&](int v, float (&x)[kQuantVec]) {
      const int n = vec_width<kAligned>(p.hidden, v);
      return lane_values<kFused>(load_row_vec<kAligned>(row + v * kQuantVec, n),
                                 kFused ? load_row_vec<kAligned>(up + v * kQuantVec, n) : Raw8<InT>{}, x, special);
    };
    float amax = 0.0f;
  #pragma unroll 4
    for (int v = threadIdx.x; v < vecs; v += blockDim.x) {
      float x[kQuantVec];
      amax = fmaxf(amax, values(v, x));
    }
    amax = block_max(amax, smem);
    const ScaleAndMultiplier sm = make_scale(amax, p.qmax, p.pow2);
    write_rows([&](int64_t r) {
      uint8_t* q = p.q + r * p.hidden;
      for (int v = threadIdx.x; v < vecs; v += blockDim.x) {
        float x[kQuantVec];
        values(v, x);
        store_row_codes<kAligned>(q + v * kQuantVec, encode(x, sm.multiplier, p.int8),
                                  vec_width<kAligned>(p.hidden, v));
      }
      if (threadIdx.x == 0) p.s[r] = sm.scale;
    });
  }
}

}  // namespace fp8route::kernels
