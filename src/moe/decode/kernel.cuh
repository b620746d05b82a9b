#pragma once
// Device code of the grouped decode backend (launcher: decode.cu): grouped scaled FP8 GEMM for
// groups of at most 64 rows (masked with M_max <= 64, or contiguous with M_total <= 64), built to
// read the active experts' weights at the speed of a plain read. It is the dense decode kernel
// (gemm/decode/kernel.cuh) with an expert dimension:
//
// - Swap-AB on tensor cores: weight rows are the 16-row operand of mma.sync m16n8k32 (e4m3, fp32
//   accumulation), tokens the 8-column operand. A work item is (active expert, kRows weight rows);
//   the splits of K of an item form one thread block cluster.
// - Persistent: every block first scans the device counts into shared memory (which experts have
//   rows), then its cluster walks the items of the active experts only, so an expert without rows
//   costs no block and no byte of its weight. The grid is sized from the resident slots, not from
//   the counts: the launch is the same for every routing (a CUDA graph replays it).
// - One producer warp streams, per 128-wide K block, a [kRows x 128 B] weight box of the expert
//   (3-D tensor map over [E, N, K]: rows past N arrive as zeros, never the next expert's) and
//   ceil(rows / 8) [8 x 128 B] activation boxes into a kStages ring (128-byte swizzle). Only the
//   8-row token tiles that hold rows are loaded and multiplied; rows of the last tile past the
//   group's end (another expert's rows, or rows past M_max) only reach token columns that are
//   never stored, and their scales are never read.
// - Each 128-wide K block's products are summed in fp32 registers outside the tensor core (block
//   scales: times sa[m, kb] * sb[e, n / 128, kb]), as the dense decode kernel does.
// - Split K: after a cluster barrier each block sums a share of the item's outputs over the peers'
//   shared memory in split order (deterministic). The ring holds the sums, so the producer waits at
//   the item's two cluster barriers before streaming the next item; without splits it runs ahead.
// - Programmatic dependent launch: every thread waits for the previous kernel before its first
//   global read (the counts may be written by it); the producer lets dependents launch once its
//   last load is issued.

#include <cuda.h>  // CUtensorMap
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "core/chain_trace.cuh"
#include "core/griddep.cuh"
#include "gemm/decode/parts.cuh"
#include "gemm/sm90.cuh"
#include "moe/sm90/common.cuh"

namespace fp8route::kernels::moe_decode {

using moe::BlockScaleA;
using moe::Groups;
using moe::GroupRows;
// The block shape and the parts of the dense decode kernel (gemm/decode/parts.cuh).
using namespace decode;

inline constexpr int kMaxExperts = 1024;     // the scan's prefix array in shared memory
inline constexpr int kActBox = 8 * kKBlock;  // one 8-token tile of one K block

struct Params : moe::GroupedArgs {
  int split_kblocks;  // K blocks per split (the last split may have fewer)
  int splits;         // cluster size along y; 1 = no cluster
  int row_blocks;     // ceil(N / kRows)
  FP8ROUTE_TRACE_FIELD
};

template <int kTokenTiles, int kRowTilesPerWarp, int kStages>
struct Traits : decode::Tiles<kTokenTiles, kRowTilesPerWarp> {
  using B = decode::Tiles<kTokenTiles, kRowTilesPerWarp>;
  using B::kActTile, B::kRedBytes, B::kRows, B::kWeightTile;
  // From a 1024-byte aligned base (the 128-byte swizzle repeats every 1024 bytes). Block-scale
  // slices of a split's K range: sa [kb][kMaxM] and sb [kb] (one 128-row weight block).
  static constexpr int kWeightOff = 0;
  static constexpr int kActOff = kWeightOff + kStages * kWeightTile;
  static constexpr int kSaOff = kActOff + kStages * kActTile;
  static constexpr int kSbOff = kSaOff + kSaBytes;
  static constexpr int kPrefixOff = kSbOff + kSbBytes;
  static constexpr int kBarOff = kPrefixOff + (kMaxExperts + 1 + 1) / 2 * 8;
  static constexpr int kBytes = kBarOff + 2 * kStages * 8;
  static constexpr int kSmemBytes = kBytes + 1024;  // + alignment slack of the dynamic base
  static_assert(kStages >= 2, "a pipeline needs at least two stages");
  static_assert(128 % kRows == 0, "a block's rows lie in one 128-row weight scale block");
  static_assert(kRedBytes <= kStages * kWeightTile, "the split sums reuse the weight ring");
  static_assert(kSmemBytes <= 227 * 1024, "shared memory per block");
};

// Tensor and row scales of output (m, n) of expert e; the sum is multiplied by sa, then by sb.
__device__ __forceinline__ float act_scale(const Params& p, int e, int a_row) {
  return p.scale_kind == 0 ? __ldg(p.sa + (p.sa_per_expert ? e : 0)) : __ldg(p.sa + a_row);
}
__device__ __forceinline__ float weight_scale(const Params& p, int e, int n) {
  return p.scale_kind == 0 ? __ldg(p.sb + e) : __ldg(p.sb + int64_t(e) * p.n + n);
}

template <class OutT>
__device__ __forceinline__ void store(const Params& p, float v, float sa, float sb, int a_row, int n) {
  if (p.scale_kind != 2) {
    v = v * sa;
    v = v * sb;
  }
  store_out(v, static_cast<OutT*>(p.out) + int64_t(a_row) * p.n + n);
}

// ---- the kernel ---------------------------------------------------------------------------------

template <class OutT, int kTokenTiles, int kRowTilesPerWarp, int kStages>
__global__ void __launch_bounds__(kThreads, 1)
    sm90_fp8_grouped_decode(const __grid_constant__ CUtensorMap wmap, const __grid_constant__ CUtensorMap amap,
                            const Params p) {
  using T = Traits<kTokenTiles, kRowTilesPerWarp, kStages>;
  constexpr int NT = kTokenTiles, RT = kRowTilesPerWarp;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  const uint32_t base = smem_u32(smem);
  const uint32_t full0 = base + T::kBarOff, empty0 = full0 + kStages * 8;
  float* sa_s = reinterpret_cast<float*>(smem + T::kSaOff);
  float* sb_s = reinterpret_cast<float*>(smem + T::kSbOff);
  int* prefix = reinterpret_cast<int*>(smem + T::kPrefixOff);

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int kb0 = blockIdx.y * p.split_kblocks;
  const int nk = min(p.kblocks, kb0 + p.split_kblocks) - kb0;
  const bool block_scales = p.scale_kind == 2;
  // The producer warp returns after its loop, the consumers at the end: every thread meets the
  // exit barrier of the trace scope.
  FP8ROUTE_TRACE_SCOPE(p.trace);

  init_ring(full0, empty0, kStages);
  griddep_wait();
  FP8ROUTE_TRACE(trace_release(p.trace));
  // One tile per expert with rows: prefix[e] is e's rank among the active experts. The scan's
  // barriers also publish the barrier initialization.
  moe::scan_tiles<kThreads>(p.g, 0x7FFFFFFF, prefix);
  const int items = prefix[p.g.experts] * p.row_blocks;

  // An item's expert and rows; every block of a cluster walks the same items (same blockIdx.x).
  struct Item {
    int e, row0, nt;
    GroupRows gr;
  };
  const auto item = [&](int w) {
    Item it;
    it.e = moe::find_expert(prefix, p.g.experts, w / p.row_blocks);
    it.row0 = (w % p.row_blocks) * T::kRows;
    it.gr = moe::group_rows(p.g, it.e);
    it.nt = (it.gr.count + 7) / 8;
    return it;
  };

  // Split K: the item's sums are in every block's ring; this block finishes its share of the
  // [count x rows] outputs, summing the splits in rank order. All threads of the block take part.
  const auto reduce = [&](const Item& it) {
    cluster_sync();
    const SplitShare sh = split_share<T::kRows>(p.n, it.row0, it.gr.count, p.splits);
    for (int idx = sh.first + threadIdx.x; idx < sh.last; idx += kThreads) {
      const int m = idx / sh.rows, r = idx % sh.rows, n = it.row0 + r, a_row = it.gr.row0 + m;
      const float v = peer_sum<T::kRedLd>(base + T::kWeightOff, m, r, p.splits);
      const float sa = block_scales ? 1.f : act_scale(p, it.e, a_row);
      const float sb = block_scales ? 1.f : weight_scale(p, it.e, n);
      store<OutT>(p, v, sa, sb, a_row, n);
    }
    // The ring is written next by the tensor memory accelerator (the async proxy).
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    cluster_sync();  // peers read this block's sums until here
  };

  int iter = 0;  // K blocks streamed by this block over all its items: the ring position
  if (warp == kConsumerWarps) {
    // ---- producer: lane 0 streams the tiles ----
    const uint64_t keep = l2_policy_evict_last(), stream = l2_policy_evict_first();
    for (int w = blockIdx.x; w < items; w += gridDim.x) {
      const Item it = item(w);
      if (lane == 0) {
        for (int i = 0; i < nk; ++i, ++iter) {
          const int s = iter % kStages;
          if (iter >= kStages) mbar_wait(empty0 + 8 * s, ((iter / kStages) & 1) ^ 1);
          const uint32_t full = full0 + 8 * s;
          const int x = (kb0 + i) * kKBlock;
          mbar_expect_tx(full, T::kWeightTile + it.nt * kActBox);
          moe::tma_load_3d(base + T::kWeightOff + s * T::kWeightTile, &wmap, x, it.row0, it.e, full, stream);
          for (int j = 0; j < it.nt; ++j)
            tma_load_2d(base + T::kActOff + s * T::kActTile + j * kActBox, &amap, x, it.gr.row0 + 8 * j, full, keep);
        }
      }
      __syncwarp();
      if (p.splits > 1) reduce(it);
    }
    griddep_launch_dependents();
    return;
  }

  // ---- consumers ----
  const int tid = threadIdx.x;  // 0..127
  const int g = lane / 4, t = lane % 4;
  const int tile0 = warp * RT * 16;  // this warp's first row in the block
  const MmaLanes lanes = mma_lanes(lane);

  for (int w = blockIdx.x; w < items; w += gridDim.x) {
    const Item it = item(w);
    const int e = it.e, count = it.gr.count, nt = it.nt;
    if (block_scales) {
      // This item's scale slices: sa of the group's rows over the split's K blocks (zeros past the
      // group: their columns are never stored), sb of the item's 128-row weight block.
      asm volatile("bar.sync 1, %0;" ::"n"(kConsumerWarps * 32));  // the previous item's are read
      for (int i = tid; i < nk * T::kMaxM; i += kConsumerWarps * 32) {
        const int m = i % T::kMaxM, kb = kb0 + i / T::kMaxM;
        sa_s[i] = m < count ? moe::block_sa(p.bsa, it.gr.batch, it.gr.t0 + m, kb) : 0.f;
      }
      const int nb = (p.n + 127) / 128;
      const float* sb_e = p.sb + (int64_t(e) * nb + it.row0 / 128) * p.kblocks + kb0;
      for (int i = tid; i < nk; i += kConsumerWarps * 32) sb_s[i] = __ldg(sb_e + i);
      asm volatile("bar.sync 1, %0;" ::"n"(kConsumerWarps * 32));
    }
    // Tensor and row scales of the epilogue, loaded now so that their latency hides behind the
    // stream (with split K the reduction applies them).
    float e_sb[RT][2] = {}, e_sa[NT][2] = {};
    if (!block_scales && p.splits == 1) {
#pragma unroll
      for (int r = 0; r < RT; ++r)
#pragma unroll
        for (int h = 0; h < 2; ++h) e_sb[r][h] = weight_scale(p, e, min(it.row0 + tile0 + 16 * r + g + 8 * h, p.n - 1));
#pragma unroll
      for (int j = 0; j < NT; ++j)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int m = 8 * j + 2 * t + h;
          e_sa[j][h] = m < count ? act_scale(p, e, it.gr.row0 + m) : 0.f;
        }
    }

    float acc[RT][NT][4];
    zero(acc);

    for (int i = 0; i < nk; ++i, ++iter) {
      const int s = iter % kStages;
      mbar_wait(full0 + 8 * s, (iter / kStages) & 1);
      const uint32_t wt = base + T::kWeightOff + s * T::kWeightTile;
      const uint32_t at = base + T::kActOff + s * T::kActTile;
      float part[RT][NT][4];
      uint32_t b[NT][4], a[4];
      mma_stage(part, wt, at, tile0, lanes, nt, b, a);
      __syncwarp();
      if (lane == 0) mbar_arrive(empty0 + 8 * s);
      // The item's rows lie in one 128-row weight block: sb_s [nk], a row-block stride of 0.
      if (block_scales)
        accumulate_scaled(acc, part, sa_s, T::kMaxM, sb_s, 0, i, it.row0, tile0, t);
      else
        accumulate(acc, part);
    }

    if (p.splits == 1) {
#pragma unroll
      for (int r = 0; r < RT; ++r)
#pragma unroll
        for (int j = 0; j < NT; ++j)
#pragma unroll
          for (int q = 0; q < 4; ++q) {
            const int n = it.row0 + tile0 + 16 * r + g + (q >= 2 ? 8 : 0);
            const int m = 8 * j + 2 * t + (q & 1);
            if (n < p.n && m < count)
              store<OutT>(p, acc[r][j][q], e_sa[j][q & 1], e_sb[r][q >> 1], it.gr.row0 + m, n);
          }
    } else {
      // Every stage of the item was consumed and the producer streams nothing more before the
      // reduction ends, so the ring is free for the sums.
      write_sums<T::kRedLd>(reinterpret_cast<float*>(smem + T::kWeightOff), acc, g, t, tile0);
      reduce(it);
    }
  }
}

}  // namespace fp8route::kernels::moe_decode
