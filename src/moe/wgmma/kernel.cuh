#pragma once
// Device code of the grouped wgmma backend (launcher: wgmma.cu): grouped scaled FP8 GEMM for any
// group sizes (prefill, and decode beyond the decode backend's 64 rows), every scale kind. The
// design of the dense block-scaled kernel (gemm/block/kernel.cuh) with a tile scheduler over
// (expert, n-tile, m-tile):
//
// - Persistent: every block first scans the device counts into shared memory (prefix[e] = 128-row
//   m-tiles of the experts before e), then walks the tiles t = blockIdx.x, + gridDim.x, ... of
//   prefix[E] x tiles_n; a tile's expert is found by binary search over the scan. Tiles are
//   expert-major and, within an expert, n-tile-major with the m-tile fastest, so that blocks running
//   together read the same weight tile through L2. An expert without rows owns no tile and its
//   weight is never read; the launch does not depend on the counts (a CUDA graph replays it).
// - A tile is 128 rows of one group from its first row (no alignment of groups): its a box starts at
//   the group's row, and rows past the group's end (another expert's, or past the matrix: zeros)
//   are multiplied but never stored. The weight box comes from a 3-D tensor map over [E, N, K].
// - Producer warpgroup: one thread streams [128 x 128 B] tiles of a and b per 128-wide K block into
//   a kStages ring with the tensor memory accelerator (128-byte swizzle). Block scales: three more
//   warps take the ring slots in turn and write the tile's 128 activation scales, decoded to f32
//   from any layout and storage group quant writes, into the slot (zeros past the group); a slot is
//   full when its bytes have landed and its scale warp has arrived. Three warps, because each waits
//   one global-load latency per slot, longer than a slot's MMAs.
// - Two consumer warpgroups each own 64 rows of the tile: per K block, four wgmma m64n128k32 into an
//   fp32 accumulator started from zero, then total += acc * sa * sb (block) or total += acc (tensor,
//   row: the fp32 sum over K, scaled in the epilogue by sa then sb): full fp32 accumulation across
//   K, the precise class, for every scale kind.
// - The epilogue stores from registers, masking rows past the group and columns past N.
// - Programmatic dependent launch: every thread waits for the previous kernel before its first
//   global read; the producer lets dependents launch once its last load is issued.

#include <cuda.h>  // CUtensorMap
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "core/griddep.cuh"
#include "gemm/sm90.cuh"
#include "moe/sm90/common.cuh"
#include "moe/wgmma/mma.cuh"

namespace fp8route::kernels::moe_wgmma {

using moe::BlockScaleA;
using moe::GroupRows;
using moe::Groups;

inline constexpr int kBM = 128;  // tile rows: two consumer warpgroups of 64
inline constexpr int kBN = 128;  // tile columns: one 128-row weight scale block
inline constexpr int kBK = 128;  // K bytes per stage = the scale block
inline constexpr int kConsumers = 2;
inline constexpr int kThreads = 128 * (kConsumers + 1);
inline constexpr int kScaleWarps = 3;     // producer warps 1..3
inline constexpr int kMaxExperts = 1024;  // the scan's prefix array in shared memory
// Registers per thread after reconfiguration: 128 x 56 + 256 x 224 <= 65536 (the scale warps
// decode any scale layout and need more than the 40 of a producer that only issues loads).
inline constexpr int kProducerRegs = 56;
inline constexpr int kConsumerRegs = 224;

struct Params : moe::GroupedArgs {
  int tiles_n;     // ceil(N / 128)
  bool out_pairs;  // out and N allow two-element stores
};

template <int kStages>
struct Traits {
  static constexpr int kATile = kBM * kBK;
  static constexpr int kBTile = kBN * kBK;
  static constexpr int kSaTile = kBM * 4;
  // From a 1024-byte aligned base (the 128-byte swizzle repeats every 1024 bytes; every tile and
  // each warpgroup's 64-row half of a starts on such a boundary).
  static constexpr int kAOff = 0;
  static constexpr int kBOff = kAOff + kStages * kATile;
  static constexpr int kSaOff = kBOff + kStages * kBTile;
  static constexpr int kPrefixOff = kSaOff + kStages * kSaTile;
  static constexpr int kBarOff = kPrefixOff + (kMaxExperts + 1 + 1) / 2 * 8;
  static constexpr int kBytes = kBarOff + 2 * kStages * 8;
  static constexpr int kSmemBytes = kBytes + 1024;  // + alignment slack of the dynamic base
  static constexpr uint32_t kStageTx = kATile + kBTile;
  static constexpr int kEmptyArrivals = kConsumers * 4;  // every consumer warp
  static_assert(kStages >= 2, "a pipeline needs at least two stages");
  static_assert(kSmemBytes <= 227 * 1024, "shared memory per block");
};

// Tile t: its expert, group rows, first row within the group and first column.
struct Tile {
  int e, m0, n0;
  GroupRows gr;
};
__device__ __forceinline__ Tile tile_of(const Params& p, const int* prefix, int t) {
  Tile x;
  x.e = moe::find_expert(prefix, p.g.experts, t / p.tiles_n);
  const int m_tiles = prefix[x.e + 1] - prefix[x.e];
  const int local = t - prefix[x.e] * p.tiles_n;
  x.m0 = (local % m_tiles) * kBM;
  x.n0 = (local / m_tiles) * kBN;
  x.gr = moe::group_rows(p.g, x.e);
  return x;
}

__device__ __forceinline__ void store2(__nv_bfloat16* p, float a, float b) {
  *reinterpret_cast<__nv_bfloat162*>(p) = __floats2bfloat162_rn(a, b);
}
__device__ __forceinline__ void store2(__half* p, float a, float b) {
  *reinterpret_cast<__half2*>(p) = __floats2half2_rn(a, b);
}

__device__ __forceinline__ float lds_f32(uint32_t addr) {
  float v;
  asm volatile("ld.shared.f32 %0, [%1];" : "=f"(v) : "r"(addr) : "memory");
  return v;
}

// ---- the kernel ---------------------------------------------------------------------------------

template <class OutT, int kStages>
__global__ void __launch_bounds__(kThreads, 1)
    sm90_fp8_grouped_wgmma(const __grid_constant__ CUtensorMap amap, const __grid_constant__ CUtensorMap bmap,
                           const Params p) {
  using T = Traits<kStages>;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  const uint32_t base = smem_u32(smem);
  const uint32_t full0 = base + T::kBarOff, empty0 = full0 + kStages * 8;
  int* prefix = reinterpret_cast<int*>(smem + T::kPrefixOff);
  const bool block_scales = p.scale_kind == 2;

  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      mbar_init(full0 + 8 * s, 1 + (block_scales ? 32 : 0));
      mbar_init(empty0 + 8 * s, T::kEmptyArrivals);
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  griddep_wait();
  moe::scan_tiles<kThreads>(p.g, kBM, prefix);  // its barriers also publish the initialization
  const int num_tiles = prefix[p.g.experts] * p.tiles_n;
  const int wg = threadIdx.x / 128;

  if (wg == 0) {
    // ---- producer warpgroup ----
    setmaxnreg_dec<kProducerRegs>();
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (warp == 0) {
      if (lane == 0) {
        int s = 0;
        uint32_t phase = 0;
        for (int t = blockIdx.x; t < num_tiles; t += gridDim.x) {
          const Tile x = tile_of(p, prefix, t);
          for (int kb = 0; kb < p.kblocks; ++kb) {
            mbar_wait(empty0 + 8 * s, phase ^ 1);
            const uint32_t full = full0 + 8 * s;
            mbar_expect_tx(full, T::kStageTx);
            tma_load_2d(base + T::kAOff + s * T::kATile, &amap, kb * kBK, x.gr.row0 + x.m0, full);
            moe::tma_load_3d(base + T::kBOff + s * T::kBTile, &bmap, kb * kBK, x.n0, x.e, full);
            if (++s == kStages) s = 0, phase ^= 1;
          }
        }
      }
    } else if (block_scales && warp <= kScaleWarps) {
      // Scale warp w fills the slots of K blocks w - 1, w - 1 + kScaleWarps, ... of the stream.
      int iter = 0;
      for (int t = blockIdx.x; t < num_tiles; t += gridDim.x) {
        const Tile x = tile_of(p, prefix, t);
        for (int kb = 0; kb < p.kblocks; ++kb, ++iter) {
          if (iter % kScaleWarps != warp - 1) continue;
          const int s = iter % kStages;
          float v[kBM / 32];
#pragma unroll
          for (int q = 0; q < kBM / 32; ++q) {
            const int m = x.m0 + lane + 32 * q;
            v[q] = m < x.gr.count ? moe::block_sa(p.bsa, x.gr.batch, x.gr.t0 + m, kb) : 0.f;
          }
          mbar_wait(empty0 + 8 * s, ((iter / kStages) & 1) ^ 1);
          const uint32_t dst = base + T::kSaOff + s * T::kSaTile + lane * 4;
#pragma unroll
          for (int q = 0; q < kBM / 32; ++q)
            asm volatile("st.shared.f32 [%0], %1;" ::"r"(dst + 32 * 4 * q), "f"(v[q]) : "memory");
          mbar_arrive(full0 + 8 * s);
        }
      }
    }
    __syncwarp();
    griddep_launch_dependents();
    return;
  }

  // ---- consumers ----
  setmaxnreg_inc<kConsumerRegs>();
  constexpr int kRegs = kBN / 2;
  const int c = wg - 1;  // this warpgroup's 64-row half
  const int lane = threadIdx.x % 32, warp = (threadIdx.x / 32) % 4;
  const int r_lo = 16 * warp + lane / 4;  // rows r_lo and r_lo + 8 of the half
  const uint32_t sa0 = base + T::kSaOff + (64 * c + r_lo) * 4;
  const uint64_t da0 = smem_desc(base + T::kAOff + c * 64 * kBK);
  const uint64_t db0 = smem_desc(base + T::kBOff);
  const int nb = (p.n + 127) / 128;
  float acc[kRegs], total[kRegs];
  int s = 0;
  uint32_t phase = 0;

  for (int t = blockIdx.x; t < num_tiles; t += gridDim.x) {
    const Tile x = tile_of(p, prefix, t);
    // Block scales: sb of the tile's 128-row weight block, two K blocks ahead of its use (a global
    // load outlasts one K block's MMAs).
    const float* sbp = p.sb + (int64_t(x.e) * nb + x.n0 / 128) * p.kblocks;
    float sb_next = 1.f, sb_after = 1.f;
    if (block_scales) {
      sb_next = __ldg(sbp);
      if (p.kblocks > 1) sb_after = __ldg(sbp + 1);
    }
#pragma unroll
    for (int i = 0; i < kRegs; ++i) total[i] = 0.f;

    for (int kb = 0; kb < p.kblocks; ++kb) {
      mbar_wait(full0 + 8 * s, phase);
      float sa_lo = 1.f, sa_hi = 1.f;
      if (block_scales) {
        sa_lo = lds_f32(sa0 + s * T::kSaTile);
        sa_hi = lds_f32(sa0 + s * T::kSaTile + 8 * 4);
      }
      const uint64_t da = da0 + uint64_t(s * (T::kATile >> 4));
      const uint64_t db = db0 + uint64_t(s * (T::kBTile >> 4));
#pragma unroll
      for (int i = 0; i < kRegs; ++i) fence_reg(acc[i]);
      wgmma_fence();
#pragma unroll
      for (int k = 0; k < kBK / 32; ++k) mma_m64n128k32(acc, da + 2 * k, db + 2 * k, k);
      wgmma_commit();
      wgmma_wait0();
#pragma unroll
      for (int i = 0; i < kRegs; ++i) fence_reg(acc[i]);
      if (lane == 0) mbar_arrive(empty0 + 8 * s);
      if (++s == kStages) s = 0, phase ^= 1;

      if (block_scales) {
        const float sb = sb_next;
        sb_next = sb_after;
        if (kb + 2 < p.kblocks) sb_after = __ldg(sbp + kb + 2);
        const float lo = sa_lo * sb, hi = sa_hi * sb;
#pragma unroll
        for (int j = 0; j < kRegs / 4; ++j) {
          total[4 * j + 0] = __fmaf_rn(acc[4 * j + 0], lo, total[4 * j + 0]);
          total[4 * j + 1] = __fmaf_rn(acc[4 * j + 1], lo, total[4 * j + 1]);
          total[4 * j + 2] = __fmaf_rn(acc[4 * j + 2], hi, total[4 * j + 2]);
          total[4 * j + 3] = __fmaf_rn(acc[4 * j + 3], hi, total[4 * j + 3]);
        }
      } else {
#pragma unroll
        for (int i = 0; i < kRegs; ++i) total[i] += acc[i];
      }
    }

    // Epilogue: rows of the group only, columns below N; tensor and row scales applied as
    // (sum * sa) * sb.
    OutT* out = static_cast<OutT*>(p.out);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int m = x.m0 + 64 * c + r_lo + 8 * h;
      if (m >= x.gr.count) continue;
      const int row = x.gr.row0 + m;
      OutT* orow = out + int64_t(row) * p.n;
      const float sa = block_scales ? 1.f
                       : p.scale_kind == 0 ? __ldg(p.sa + (p.sa_per_expert ? x.e : 0))
                                           : __ldg(p.sa + row);
#pragma unroll
      for (int j = 0; j < kRegs / 4; ++j) {
        const int n = x.n0 + 8 * j + 2 * (lane % 4);
        float v0 = total[4 * j + 2 * h], v1 = total[4 * j + 2 * h + 1];
        if (!block_scales) {
          const float sb0 = p.scale_kind == 0 ? __ldg(p.sb + x.e) : __ldg(p.sb + int64_t(x.e) * p.n + min(n, p.n - 1));
          const float sb1 = p.scale_kind == 0 ? sb0 : __ldg(p.sb + int64_t(x.e) * p.n + min(n + 1, p.n - 1));
          v0 = v0 * sa, v1 = v1 * sa;
          v0 = v0 * sb0, v1 = v1 * sb1;
        }
        if (n + 1 < p.n && p.out_pairs) {
          store2(orow + n, v0, v1);
        } else {
          if (n < p.n) store_out(v0, orow + n);
          if (n + 1 < p.n) store_out(v1, orow + n + 1);
        }
      }
    }
  }
}

}  // namespace fp8route::kernels::moe_wgmma
