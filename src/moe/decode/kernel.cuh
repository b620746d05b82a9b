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

#include "core/griddep.cuh"
#include "gemm/sm90.cuh"
#include "moe/sm90/common.cuh"

namespace fp8route::kernels::moe_decode {

using moe::BlockScaleA;
using moe::Groups;
using moe::GroupRows;

inline constexpr int kConsumerWarps = 4;
inline constexpr int kThreads = (kConsumerWarps + 1) * 32;  // + the producer warp
inline constexpr int kKBlock = 128;                         // bytes of K per stage = the scale block
inline constexpr int kMaxSplits = 8;                        // portable cluster size
inline constexpr int kMaxExperts = 1024;                    // the scan's prefix array in shared memory
inline constexpr int kActBox = 8 * kKBlock;                 // one 8-token tile of one K block
// Block-scale slices of a split's K range: sa [kb][kMaxM] and sb [kb] (kRows <= 128: one 128-row
// weight block). The launcher keeps the K slices short enough to fit.
inline constexpr int kSaBytes = 16 * 1024;
inline constexpr int kSbBytes = 4 * 1024;

struct Params {
  Groups g;
  BlockScaleA bsa;   // block scales
  const float* sa;   // tensor / row scales: [1] or [E]; [rows of a]
  const float* sb;   // [E] | [E, N] | [E, ceil(N/128), kblocks]
  void* out;         // OutT [rows of a, N]
  int n;
  int kblocks;        // K / 128 rounded up
  int split_kblocks;  // K blocks per split (the last split may have fewer)
  int splits;         // cluster size along y; 1 = no cluster
  int row_blocks;     // ceil(N / kRows)
  int scale_kind;     // 0 tensor, 1 row, 2 block
  bool sa_per_expert; // tensor: sa [E]
};

template <int kTokenTiles, int kRowTilesPerWarp, int kStages>
struct Traits {
  static constexpr int kMaxM = 8 * kTokenTiles;
  static constexpr int kRows = 16 * kRowTilesPerWarp * kConsumerWarps;
  static constexpr int kWeightTile = kRows * kKBlock;
  static constexpr int kActTile = kMaxM * kKBlock;
  static constexpr int kRedLd = kRows + 4;  // fp32 sums [kMaxM][kRedLd] for the split reduction
  static constexpr int kRedBytes = kMaxM * kRedLd * 4;
  // From a 1024-byte aligned base (the 128-byte swizzle repeats every 1024 bytes).
  static constexpr int kWeightOff = 0;
  static constexpr int kActOff = kWeightOff + kStages * kWeightTile;
  static constexpr int kSaOff = kActOff + kStages * kActTile;
  static constexpr int kSbOff = kSaOff + kSaBytes;
  static constexpr int kPrefixOff = kSbOff + kSbBytes;
  static constexpr int kBarOff = kPrefixOff + (kMaxExperts + 1 + 1) / 2 * 8;
  static constexpr int kBytes = kBarOff + 2 * kStages * 8;
  static constexpr int kSmemBytes = kBytes + 1024;  // + alignment slack of the dynamic base
  static_assert(kStages >= 2, "a pipeline needs at least two stages");
  static_assert(kRows <= 128, "a block's rows lie in one 128-row weight scale block");
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

  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      mbar_init(full0 + 8 * s, 1);
      mbar_init(empty0 + 8 * s, kConsumerWarps);
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  griddep_wait();
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
    const int rows = min(T::kRows, p.n - it.row0), count = it.gr.count * rows;
    const int per = (count + p.splits - 1) / p.splits;
    const int first = blockIdx.y * per, last = min(count, first + per);
    const uint32_t red = base + T::kWeightOff;
    for (int idx = first + threadIdx.x; idx < last; idx += kThreads) {
      const int m = idx / rows, r = idx % rows, n = it.row0 + r, a_row = it.gr.row0 + m;
      const uint32_t addr = red + (m * T::kRedLd + r) * 4;
      float v = 0.f;
      for (int q = 0; q < p.splits; ++q) v += ld_peer_f32(addr, q);
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
  // ldmatrix lane roles: weight tile rows (two 8-row halves) and chunk pairs; token rows.
  const int a_row = (lane & 7) + ((lane >> 3) & 1) * 8, a_chunk = lane >> 4;
  const int b_row = lane & 7, b_chunk = lane >> 3;

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
#pragma unroll
    for (int r = 0; r < RT; ++r)
#pragma unroll
      for (int j = 0; j < NT; ++j)
#pragma unroll
        for (int q = 0; q < 4; ++q) acc[r][j][q] = 0.f;

    for (int i = 0; i < nk; ++i, ++iter) {
      const int s = iter % kStages;
      mbar_wait(full0 + 8 * s, (iter / kStages) & 1);
      const uint32_t wt = base + T::kWeightOff + s * T::kWeightTile;
      const uint32_t at = base + T::kActOff + s * T::kActTile;
      float part[RT][NT][4];
#pragma unroll
      for (int r = 0; r < RT; ++r)
#pragma unroll
        for (int j = 0; j < NT; ++j)
#pragma unroll
          for (int q = 0; q < 4; ++q) part[r][j][q] = 0.f;
#pragma unroll
      for (int kp = 0; kp < 2; ++kp) {  // two 32-wide k steps per 64 bytes
        uint32_t b[NT][4];
#pragma unroll
        for (int j = 0; j < NT; ++j)
          if (j < nt) ldmatrix_x4(b[j], swz(at, 8 * j + b_row, 4 * kp + b_chunk));
#pragma unroll
        for (int ks = 0; ks < 2; ++ks) {
#pragma unroll
          for (int r = 0; r < RT; ++r) {
            uint32_t a[4];
            ldmatrix_x4(a, swz(wt, tile0 + 16 * r + a_row, 2 * (2 * kp + ks) + a_chunk));
#pragma unroll
            for (int j = 0; j < NT; ++j)
              if (j < nt) mma_e4m3(part[r][j], a, b[j][2 * ks], b[j][2 * ks + 1]);
          }
        }
      }
      __syncwarp();
      if (lane == 0) mbar_arrive(empty0 + 8 * s);
      if (block_scales) {
        const float sbv = sb_s[i];
#pragma unroll
        for (int r = 0; r < RT; ++r)
#pragma unroll
          for (int j = 0; j < NT; ++j)
#pragma unroll
            for (int q = 0; q < 4; ++q)
              acc[r][j][q] = __fmaf_rn(part[r][j][q], sa_s[i * T::kMaxM + 8 * j + 2 * t + (q & 1)] * sbv, acc[r][j][q]);
      } else {
#pragma unroll
        for (int r = 0; r < RT; ++r)
#pragma unroll
          for (int j = 0; j < NT; ++j)
#pragma unroll
            for (int q = 0; q < 4; ++q) acc[r][j][q] += part[r][j][q];
      }
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
      float* red = reinterpret_cast<float*>(smem + T::kWeightOff);
      asm volatile("bar.sync 1, %0;" ::"n"(kConsumerWarps * 32));
#pragma unroll
      for (int r = 0; r < RT; ++r)
#pragma unroll
        for (int j = 0; j < NT; ++j)
#pragma unroll
          for (int q = 0; q < 4; ++q)
            red[(8 * j + 2 * t + (q & 1)) * T::kRedLd + tile0 + 16 * r + g + (q >= 2 ? 8 : 0)] = acc[r][j][q];
      reduce(it);
    }
  }
}

}  // namespace fp8route::kernels::moe_decode
