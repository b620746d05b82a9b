#pragma once
// Device code of the decode backend (launcher: decode.cu): scaled FP8 GEMM for small M, built to
// read the weight at the speed of a plain read of it.
//
// Swap-AB on tensor cores: the weight rows are the 16-row operand of mma.sync m16n8k32 (e4m3,
// fp32 accumulation) and the tokens the 8-column operand. A block owns kRows weight rows and one
// K slice of whole 128-wide K blocks; one producer warp streams [kRows x 128 B] weight tiles and
// [kMaxM x 128 B] activation tiles into a kStages-deep shared-memory ring with the tensor memory
// accelerator (128-byte swizzle, rows and columns past the matrix filled with zeros, so no edge
// case reaches the math), and four consumer warps each multiply kRowTilesPerWarp 16-row tiles.
// Every 128-wide K block's products are summed into fp32 registers outside the tensor core
// (block scales: times sa[kb, m] * sb[n / 128, kb]), so every scale kind gets full fp32
// accumulation across K, not the tensor core's reduced-precision chained sum.
//
// Split K: the splits of a row range form one thread block cluster; each block leaves its sums in
// its shared memory and, after a cluster barrier, each block finishes a share of the outputs by
// reading the peers' sums through distributed shared memory in split order (deterministic).
//
// Programmatic dependent launch: with `prefetch_weight` the producer issues the first `ring` weight
// tiles (the ring's depth: the config's kStages, or more where the launcher deepens it), and the
// consumers read the weight scales and bias, before griddepcontrol.wait, so the weight stream
// starts while the previous kernel finishes; the caller promises that none of them was written by
// that kernel (LinearPlan's weights are written at load time). Without it, every read of every
// input comes after the wait. Each block signals its dependents once its last load is issued.

#include <cuda.h>  // CUtensorMap
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "core/chain_trace.cuh"
#include "core/griddep.cuh"
#include "gemm/decode/parts.cuh"
#include "gemm/sm90.cuh"

namespace fp8route::kernels::decode {

struct Params {
  const float* sa;
  const float* sb;
  const void* bias;  // [N] of OutT, or null
  void* out;         // OutT [M, N], row stride ldo
  int64_t ldo;
  int m, n;
  int kblocks;        // ceil(K / 128)
  int split_kblocks;  // K blocks per split (the last split may have fewer)
  int splits;         // cluster size along y; 1 = no cluster
  int scale_kind;     // 0 tensor, 1 row, 2 block
  bool sa_vector, sb_vector;
  int sa_ld;  // block: align(M, 4)
  int sb_ld;  // block: ceil(K / 128)
  bool prefetch_weight;
  int ring;         // stages of the ring, >= the config's kStages (the launcher sized the shared memory)
  int scale_bytes;  // kSaBytes + kSbBytes, or 0 (no block scales) where the launcher leaves them out
  FP8ROUTE_TRACE_FIELD
};

template <int kTokenTiles, int kRowTilesPerWarp, int kStages>
struct Traits : Tiles<kTokenTiles, kRowTilesPerWarp> {
  using B = Tiles<kTokenTiles, kRowTilesPerWarp>;
  using B::kActTile, B::kMaxM, B::kRedBytes, B::kRows, B::kWeightTile;
  // Layout of a ring of `stages` (and block-scale slices of scale_bytes: sa [kb][align(M, 4)] and sb
  // [row blocks of 128 (<= 2)][kb]) from a 1024-byte aligned base (the 128-byte swizzle repeats
  // every 1024 bytes; both tile sizes are multiples of it).
  static constexpr int kWeightOff = 0;
  static constexpr int kScaleBytes = kSaBytes + kSbBytes;
  static constexpr int act_off(int stages) { return kWeightOff + stages * kWeightTile; }
  static constexpr int sa_off(int stages) { return act_off(stages) + stages * kActTile; }
  static constexpr int sb_off(int stages) { return sa_off(stages) + kSaBytes; }
  static constexpr int bar_off(int stages, int scale_bytes) { return sa_off(stages) + scale_bytes; }
  static constexpr int smem_bytes(int stages, int scale_bytes = kScaleBytes) {
    return bar_off(stages, scale_bytes) + 2 * stages * 8 + 1024;  // + alignment slack of the dynamic base
  }
  static constexpr int kSmemBytes = smem_bytes(kStages);  // the config's own ring
  static_assert(kWeightTile % 1024 == 0 && kActTile % 1024 == 0, "tiles keep the swizzle's 1024-byte alignment");
  static_assert(kStages >= 2, "a pipeline needs at least two stages");
  static_assert(kRows <= 256 && kMaxM <= 256, "a TMA box has at most 256 rows");
  static_assert(kRedBytes <= kStages * kWeightTile, "the split sums reuse the weight ring");
  static_assert(kRows <= 128 || kRows % 128 == 0, "a block's rows span whole 128-row scale blocks");
};


// What an output needs besides its sum: tensor/row scales (block scales were applied per K block)
// and the bias. The weight side is loaded before griddepcontrol.wait, sa after it.
template <class OutT>
__device__ __forceinline__ float weight_side(const Params& p, int n, float& bias) {
  bias = p.bias ? to_float(static_cast<const OutT*>(p.bias)[n]) : 0.f;
  return p.scale_kind != 2 ? __ldg(p.sb + (p.sb_vector ? n : 0)) : 1.f;
}
__device__ __forceinline__ float act_side(const Params& p, int m) {
  return p.scale_kind != 2 ? p.sa[p.sa_vector ? m : 0] : 1.f;
}

// One output: the sum, then (tensor/row kinds) times sa and times sb, then the bias.
template <class OutT>
__device__ __forceinline__ void store(const Params& p, float v, float sa, float sb, float bias, int m, int n) {
  if (p.scale_kind != 2) {
    v = v * sa;
    v = v * sb;
  }
  if (p.bias) v += bias;
  store_out(v, static_cast<OutT*>(p.out) + int64_t(m) * p.ldo + n);
}
template <class OutT>
__device__ __forceinline__ void finish(const Params& p, float v, int m, int n) {
  float bias;
  const float sb = weight_side<OutT>(p, n, bias);
  store<OutT>(p, v, act_side(p, m), sb, bias, m, n);
}

// ---- the kernel ---------------------------------------------------------------------------------

template <class OutT, int kTokenTiles, int kRowTilesPerWarp, int kStages>
__global__ void __launch_bounds__(kThreads, 1)
    sm90_fp8_gemm_decode(const __grid_constant__ CUtensorMap wmap, const __grid_constant__ CUtensorMap amap,
                         const Params p) {
  using T = Traits<kTokenTiles, kRowTilesPerWarp, kStages>;
  constexpr int NT = kTokenTiles, RT = kRowTilesPerWarp;
  FP8ROUTE_TRACE_SCOPE(p.trace);
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  const uint32_t base = smem_u32(smem);
  const int stages = p.ring;
  const uint32_t act0 = base + T::act_off(stages);
  const uint32_t full0 = base + T::bar_off(stages, p.scale_bytes), empty0 = full0 + stages * 8;
  float* sa_s = reinterpret_cast<float*>(smem + T::sa_off(stages));  // block scales only
  float* sb_s = reinterpret_cast<float*>(smem + T::sb_off(stages));

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int row0 = blockIdx.x * T::kRows;
  const int kb0 = blockIdx.y * p.split_kblocks;
  const int nk = min(p.kblocks, kb0 + p.split_kblocks) - kb0;
  const bool block_scales = p.scale_kind == 2;

  init_ring(full0, empty0, stages);
  __syncthreads();

  if (warp == kConsumerWarps) {
    // ---- producer: one lane streams the tiles ----
    if (lane == 0) {
      const uint64_t keep = l2_policy_evict_last(), stream = l2_policy_evict_first();
      const int pre = min(nk, stages);
      auto weight = [&](int i) {
        const int s = i % stages;
        mbar_expect_tx(full0 + 8 * s, T::kWeightTile + T::kActTile);
        tma_load_2d(base + T::kWeightOff + s * T::kWeightTile, &wmap, (kb0 + i) * kKBlock, row0, full0 + 8 * s,
                    stream);
      };
      auto act = [&](int i) {
        const int s = i % stages;
        tma_load_2d(act0 + s * T::kActTile, &amap, (kb0 + i) * kKBlock, 0, full0 + 8 * s, keep);
      };
      if (p.prefetch_weight) {
        for (int i = 0; i < pre; ++i) weight(i);
        griddep_wait();
      } else {
        griddep_wait();
        for (int i = 0; i < pre; ++i) weight(i);
      }
      for (int i = 0; i < pre; ++i) act(i);
      for (int i = pre; i < nk; ++i) {
        mbar_wait(empty0 + 8 * (i % stages), ((i / stages) & 1) ^ 1);
        weight(i);
        act(i);
      }
    }
    __syncwarp();
    griddep_launch_dependents();
    griddep_wait();  // the split epilogue below reads sa with every lane
  } else {
    // ---- consumers ----
    const int tid = threadIdx.x;  // 0..127
    const int g = lane / 4, t = lane % 4;
    const int tile0 = warp * RT * 16;  // this warp's first row in the block
    // The epilogue's scales and bias, loaded now so that their latency hides behind the stream.
    float e_sb[RT][2], e_bias[RT][2], e_sa[NT][2];
    // sb and bias, and with block scales sb of this block's 128-row blocks over its K range: before
    // the wait when the weight side is not written by the previous kernel (prefetch_weight), else
    // after it, as any input of the call.
    const auto load_weight_side = [&] {
      if (p.splits == 1) {
#pragma unroll
        for (int r = 0; r < RT; ++r)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int n = min(row0 + tile0 + 16 * r + g + 8 * h, p.n - 1);
            e_sb[r][h] = weight_side<OutT>(p, n, e_bias[r][h]);
          }
      }
      if (block_scales) {
        const int nb0 = row0 / 128, nbs = min((T::kRows + 127) / 128, (p.n + 127) / 128 - nb0);
        for (int i = tid; i < nbs * nk; i += kConsumerWarps * 32)
          sb_s[i] = __ldg(p.sb + int64_t(nb0 + i / nk) * p.sb_ld + kb0 + i % nk);
      }
    };
    if (p.prefetch_weight) load_weight_side();
    griddep_wait();
    FP8ROUTE_TRACE(trace_release(p.trace));
    if (!p.prefetch_weight) load_weight_side();
    if (block_scales) {
      for (int i = tid; i < nk * p.sa_ld; i += kConsumerWarps * 32) sa_s[i] = p.sa[int64_t(kb0) * p.sa_ld + i];
      asm volatile("bar.sync 1, %0;" ::"n"(kConsumerWarps * 32));
    }
    if (p.splits == 1) {
#pragma unroll
      for (int j = 0; j < NT; ++j)
#pragma unroll
        for (int h = 0; h < 2; ++h) e_sa[j][h] = act_side(p, min(8 * j + 2 * t + h, p.m - 1));
    }

    float acc[RT][NT][4];
    zero(acc);

    const MmaLanes lanes = mma_lanes(lane);

    for (int i = 0, s = 0, phase = 0; i < nk; ++i) {  // s: the ring slot of K block i; phase: its parity
      mbar_wait(full0 + 8 * s, phase);
      const uint32_t wt = base + T::kWeightOff + s * T::kWeightTile;
      const uint32_t at = act0 + s * T::kActTile;
      float part[RT][NT][4];
      uint32_t b[NT][4], a[4];
      mma_stage(part, wt, at, tile0, lanes, NT, b, a);
      __syncwarp();
      if (lane == 0) mbar_arrive(empty0 + 8 * s);
      if (block_scales) {
        accumulate_scaled(acc, part, sa_s, p.sa_ld, sb_s, nk, i, row0, tile0, t);
      } else {
        accumulate(acc, part);
      }
      if (++s == stages) s = 0, phase ^= 1;
    }

    if (p.splits == 1) {
#pragma unroll
      for (int r = 0; r < RT; ++r)
#pragma unroll
        for (int j = 0; j < NT; ++j)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int n = row0 + tile0 + 16 * r + g + (e >= 2 ? 8 : 0);
            const int m = 8 * j + 2 * t + (e & 1);
            if (n < p.n && m < p.m)
              store<OutT>(p, acc[r][j][e], e_sa[j][e & 1], e_sb[r][e >> 1], e_bias[r][e >> 1], m, n);
          }
    } else {
      // Every stage was consumed (each full barrier waited on), so the ring is free for the sums.
      write_sums<T::kRedLd>(reinterpret_cast<float*>(smem + T::kWeightOff), acc, g, t, tile0);
    }
  }

  if (p.splits > 1) {
    cluster_sync();
    // This block's share of the [M x kRows] outputs.
    const SplitShare sh = split_share<T::kRows>(p.n, row0, p.m, p.splits);
    for (int idx = sh.first + threadIdx.x; idx < sh.last; idx += kThreads) {
      const int m = idx / sh.rows, r = idx % sh.rows;
      finish<OutT>(p, peer_sum<T::kRedLd>(base + T::kWeightOff, m, r, p.splits), m, row0 + r);
    }
    cluster_sync();  // peers read this block's sums until here
  }
}

}  // namespace fp8route::kernels::decode
