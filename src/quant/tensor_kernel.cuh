#pragma once
// Device code of the per-tensor quantization, static and dynamic (launchers: tensor_quant.cu).

#include <cooperative_groups.h>

#include <cstdint>

#include "core/griddep.cuh"
#include "quant/row_common.cuh"

namespace fp8route::kernels {

// Grid-stride walk over the vectors of x[rows, hidden]: kRowItems loads in flight per thread,
// then fn(t, v, x) for each loaded vector (row t, vector v of the row; kAligned false: x holds +0
// past the row's end).
template <class InT, bool kAligned, class Fn>
__device__ __forceinline__ void for_each_vector(const RowQuantParams& p, Fn&& fn) {
  const int64_t vecs_per_row = row_vecs<kAligned>(p.hidden);
  const int64_t total = p.rows * vecs_per_row;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i0 = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i0 < total; i0 += kRowItems * stride) {
    Raw8<InT> raw[kRowItems];
#pragma unroll
    for (int k = 0; k < kRowItems; ++k) {
      const int64_t i = i0 + k * stride;
      if (i < total) {
        const int64_t t = i / vecs_per_row, v = i - t * vecs_per_row;
        raw[k] = load_row_vec<kAligned>(static_cast<const InT*>(p.x) + t * p.x_stride_t + v * kQuantVec,
                                        vec_width<kAligned>(p.hidden, v));
      }
    }
#pragma unroll
    for (int k = 0; k < kRowItems; ++k) {
      const int64_t i = i0 + k * stride;
      if (i >= total) break;
      const int64_t t = i / vecs_per_row;
      float x[kQuantVec];
      to_float8(raw[k], x);
      fn(t, i - t * vecs_per_row, x);
    }
  }
}

// Per-tensor amax, then the scale, in one launch. Each block takes its max over a grid-stride walk
// and folds it into ws->amax_bits (atomicMax on the bits of a non-negative float, ordered like the
// integers); the last block to finish (a ticket counter) turns the amax into the scale (*p.s) and the
// multiplier the code kernel reads (ws->multiplier), and leaves amax_bits and the counter at zero
// for the next call, so the workspace needs no clearing launch. ws starts zeroed (its allocation).
struct TensorAmaxWorkspace {
  unsigned int amax_bits;
  unsigned int blocks_done;
  float multiplier;
};

template <class InT, bool kAligned = true>
__global__ void __launch_bounds__(kRowThreads) tensor_amax_kernel(const RowQuantParams p,
                                                                  TensorAmaxWorkspace* ws) {
  griddep_launch_dependents();
  griddep_wait();
  __shared__ float smem[32];
  float amax = 0.0f;
  for_each_vector<InT, kAligned>(p, [&](int64_t, int64_t, const float (&x)[kQuantVec]) {
    amax = fmaxf(amax, finite_amax(x));
  });
  amax = block_max(amax, smem);
  if (threadIdx.x != 0) return;
  atomicMax(&ws->amax_bits, __float_as_uint(amax));
  __threadfence();
  if (atomicAdd(&ws->blocks_done, 1u) != gridDim.x - 1) return;
  // Last block: every other block's atomicMax is visible (each fenced before taking its ticket).
  const float total = __uint_as_float(atomicExch(&ws->amax_bits, 0u));
  ws->blocks_done = 0;
  const ScaleAndMultiplier sm = make_scale(total, p.qmax, false);
  *p.s = sm.scale;
  ws->multiplier = sm.multiplier;
}

// Per-tensor codes. Dynamic: the multiplier comes from tensor_amax_kernel (*multiplier). Static:
// v = x / scale, correctly rounded, then the encoder with multiplier 1 (exact).
template <class InT, bool kStatic, bool kAligned = true>
__global__ void __launch_bounds__(kRowThreads) tensor_quant_kernel(const RowQuantParams p,
                                                                   const float* multiplier) {
  griddep_launch_dependents();
  griddep_wait();
  float m = 1.0f, s = 1.0f;
  if constexpr (kStatic) s = *p.static_scale;
  else m = *multiplier;
  for_each_vector<InT, kAligned>(p, [&](int64_t t, int64_t v, const float (&xin)[kQuantVec]) {
    float x[kQuantVec];
#pragma unroll
    for (int j = 0; j < kQuantVec; ++j) x[j] = kStatic ? __fdiv_rn(xin[j], s) : xin[j];
    const uint2 codes = encode(x, m, p.int8);
    store_row_codes<kAligned>(p.q + t * p.hidden + v * kQuantVec, codes, vec_width<kAligned>(p.hidden, v));
  });
}

// Small tensors (decode activations) in one launch and one read: a thread block cluster of up to 8
// blocks of kClusterThreads, the tensor's vectors spread evenly over them (`per_thread` each, at
// most kClusterVecs, held in registers). Each block takes its max; the blocks exchange them through
// distributed shared memory (cluster barrier, read the peers' slots, barrier again so that no
// block leaves while a peer still reads its slot), then every block encodes its registers. Block 0
// writes the scale. Vectors are numbered i = row * vectors per row + column / 8. With kAligned the
// codes are contiguous, and x is read without a division per vector when its rows are contiguous
// too; rows of any width ("Rows of any width", row_common.cuh) have each vector's row and column computed,
// for x and for q.
constexpr int kClusterThreads = 256;
constexpr int kClusterMaxBlocks = 8;  // the portable cluster size
template <class InT>
constexpr int kClusterVecs = sizeof(InT) == 4 ? 4 : 8;  // 32 registers of loads per thread

template <class InT, bool kAligned = true>
__global__ void __launch_bounds__(kClusterThreads) tensor_quant_cluster_kernel(const RowQuantParams p,
                                                                               int per_thread) {
  griddep_launch_dependents();
  griddep_wait();
  constexpr int kVecs = kClusterVecs<InT>;
  __shared__ float smem[32];
  __shared__ float block_amax;
  cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
  const int vecs_per_row = static_cast<int>(row_vecs<kAligned>(p.hidden));
  const int total = static_cast<int>(p.rows) * vecs_per_row;
  [[maybe_unused]] const bool contiguous = p.x_stride_t == p.hidden;
  const int stride = static_cast<int>(gridDim.x) * kClusterThreads;
  const int base = static_cast<int>(blockIdx.x) * kClusterThreads + static_cast<int>(threadIdx.x);
  const InT* x = static_cast<const InT*>(p.x);
  // Any width: vector i's elements in x, its codes in q, and how many it holds.
  struct Place {
    int64_t x_off, q_off;
    int n;
  };
  [[maybe_unused]] auto place = [&](int i) {
    const int t = i / vecs_per_row, v = i - t * vecs_per_row;
    const int64_t col = static_cast<int64_t>(v) * kQuantVec;
    return Place{t * p.x_stride_t + col, t * p.hidden + col, vec_width<false>(p.hidden, v)};
  };
  Raw8<InT> raw[kVecs];
#pragma unroll
  for (int k = 0; k < kVecs; ++k) {
    const int i = base + k * stride;
    if (k < per_thread && i < total) {
      if constexpr (kAligned) {
        int64_t off = static_cast<int64_t>(i) * kQuantVec;
        if (!contiguous) {
          const int t = i / vecs_per_row;
          off = t * p.x_stride_t + (i - t * vecs_per_row) * kQuantVec;
        }
        raw[k] = load_raw8(x + off);
      } else {
        const Place at = place(i);
        raw[k] = load_row_vec<false>(x + at.x_off, at.n);
      }
    }
  }
  float amax = 0.0f;
#pragma unroll
  for (int k = 0; k < kVecs; ++k) {
    if (k < per_thread && base + k * stride < total) {
      float v[kQuantVec];
      to_float8(raw[k], v);
      amax = fmaxf(amax, finite_amax(v));
    }
  }
  amax = block_max(amax, smem);
  if (threadIdx.x == 0) block_amax = amax;
  cluster.sync();
  if (threadIdx.x < 32) {
    const float peer = warp_max_nonneg(
        threadIdx.x < cluster.num_blocks() ? *cluster.map_shared_rank(&block_amax, threadIdx.x) : 0.0f);
    if (threadIdx.x == 0) smem[0] = peer;
  }
  cluster.sync();  // the peers' slots are read; smem[0] is visible to the block
  const ScaleAndMultiplier sm = make_scale(smem[0], p.qmax, false);
#pragma unroll
  for (int k = 0; k < kVecs; ++k) {
    const int i = base + k * stride;
    if (k < per_thread && i < total) {
      float v[kQuantVec];
      to_float8(raw[k], v);
      if constexpr (kAligned) {
        *reinterpret_cast<uint2*>(p.q + static_cast<int64_t>(i) * kQuantVec) = encode(v, sm.multiplier, p.int8);
      } else {
        const uint2 codes = encode(v, sm.multiplier, p.int8);
        const Place at = place(i);
        store_row_codes<false>(p.q + at.q_off, codes, at.n);
      }
    }
  }
  if (blockIdx.x == 0 && threadIdx.x == 0) *p.s = sm.scale;
}

}  // namespace fp8route::kernels
