#pragma once
// sm90_fp8_gemm_block, the wgmma backend's kernel (launcher: block.cu): block-scaled FP8 GEMM for prefill,
//   y[m, n] = sum over K blocks kb of (sum_{k in kb} a[m, k] b[n, k]) * sa[kb, m] * sb[n / 128, kb].
//
// A persistent, warp-specialized kernel on the Hopper tensor cores:
// - One producer warpgroup (one thread issuing) streams, per 128-wide K block, a [128 x 128 B] tile
//   of a, a [kBN x 128 B] tile of b (128-byte swizzle) and the 128 sa of the tile's rows into a
//   kStages-deep ring with the tensor memory accelerator; rows and columns past the matrices arrive
//   as zeros, so no edge case reaches the math.
// - Two consumer warpgroups each own 64 rows of the 128-row tile: per K block, four
//   wgmma.mma_async m64nkBNk32 into an fp32 accumulator started from zero, then the promotion
//   total += acc * sa * sb in fp32 registers (full fp32 accumulation across K: the precise class).
//   Two K loops (Loop): serial, one accumulator, a warpgroup waits for its K block's MMAs before
//   promoting them while the other warpgroup's MMAs run; overlap, two accumulators, K blocks in
//   pairs, the next block's MMAs issued before this one's are waited for (wait_group 1), so that a
//   warpgroup's own MMAs run during its promotion. The promotion is where this kernel loses to
//   unscaled FP8.
// - sb (one float per 128-row weight block and K block) is read from global memory two K blocks
//   ahead of its use; sa arrives with the ring slot.
// - Register reconfiguration (setmaxnreg) moves registers from the producer to the consumers,
//   which hold two fp32 copies of their 64 x kBN tile (three with two accumulators).
// - With kCluster = 2, the two blocks of a cluster work on vertically adjacent tiles of the same
//   columns: each loads half of the shared b tile and multicasts it to both, halving b's L2 reads.
//   Each consumer warp releases a ring slot in both blocks, so a slot is refilled only when both
//   have used it.
// - Tiles are visited in groups of kGroupM row tiles (of cluster height) down a column band, so the
//   blocks running at once share a few b column panels and a few a row panels in L2.
// - Programmatic dependent launch: every thread waits for the previous kernel before its first
//   global access; the producer lets dependents launch once its last load is issued.

#include <cuda.h>  // CUtensorMap
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <numeric>

#include "core/griddep.cuh"
#include "gemm/sm90.cuh"
#include "gemm/block/mma.cuh"
#include "gemm/block/wgmma.cuh"

namespace fp8route::kernels::block {

inline constexpr int kBM = 128;  // tile rows: two consumer warpgroups of 64
inline constexpr int kBK = 128;  // K bytes per stage = the scale block
inline constexpr int kConsumers = 2;
inline constexpr int kThreads = 128 * (kConsumers + 1);
inline constexpr int kGroupM = 8;  // row tiles (clusters) per rasterization group
// Registers per thread after reconfiguration: 128 x 40 + 256 x 232 <= 65536.
inline constexpr int kProducerRegs = 40;
inline constexpr int kConsumerRegs = 232;

struct Params {
  const float* sb;   // [ceil(N/128), sb_ld]
  const void* bias;  // [N] of OutT, or null
  void* out;         // OutT [M, N], row stride ldo
  int64_t ldo;
  int m, n;
  int kblocks;   // ceil(K / 128)
  int sb_ld;     // ceil(K / 128), or its multiple of 4 (padded form)
  int tiles_m;   // ceil(M / 128) rounded up to the cluster height
  int tiles_n;   // ceil(N / kBN)
};

template <int kBN, int kStages, int kCluster, bool kTmaStore>
struct Traits {
  static constexpr int kATile = kBM * kBK;
  static constexpr int kBTile = kBN * kBK;
  static constexpr int kSaTile = kBM * 4;
  // From a 1024-byte aligned base (the 128-byte swizzle repeats every 1024 bytes; every tile and
  // each warpgroup's 64-row half of a starts on such a boundary).
  static constexpr int kAOff = 0;
  static constexpr int kBOff = kAOff + kStages * kATile;
  static constexpr int kSaOff = kBOff + kStages * kBTile;
  // Staging for the tensor-memory-accelerator store of the output (2-byte elements): per
  // warpgroup, two [64 rows x 32 columns] boxes (64-byte rows, 64-byte swizzle), written in turn.
  static constexpr int kDBox = 64 * 64;
  static constexpr int kDHalf = kTmaStore ? 2 * kDBox : 0;
  static constexpr int kDOff = (kSaOff + kStages * kSaTile + 1023) / 1024 * 1024;
  static constexpr int kBarOff = kDOff + 2 * kDHalf;
  static constexpr int kBytes = kBarOff + 2 * kStages * 8;
  static constexpr int kSmemBytes = kBytes + 1024;  // + alignment slack of the dynamic base
  static constexpr uint32_t kStageTx = kATile + kBTile + kSaTile;
  static constexpr int kEmptyArrivals = kConsumers * 4 * kCluster;  // every consumer warp of the cluster
  static_assert(kBN % (8 * kCluster) == 0 && kBN >= 64 && kBN <= 256, "b tile rows: a multiple of 8 per block");
  static_assert(kCluster == 1 || kCluster == 2, "clusters of one or two blocks");
  static_assert(!kTmaStore || kBN % 32 == 0, "the stored tile is whole 32-column boxes");
  static_assert(kStages >= 2, "a pipeline needs at least two stages");
  // Tiles start at multiples of kBN; one may begin up to 128 - gcd(kBN, 128) columns into a
  // 128-row weight scale block, and must end within the next one (the consumers hold two sb).
  static_assert(kBN + 128 - std::gcd(kBN, 128) <= 256, "a tile spans at most two scale blocks");
  static_assert(kSmemBytes <= 227 * 1024, "shared memory per block");
};

// Tile `t` of the cluster's sequence: (first row tile of the cluster, column tile).
__device__ __forceinline__ void tile_coords(const Params& p, int t, int cluster, int& tm, int& tn) {
  const int cm = p.tiles_m / cluster;  // cluster-high row bands
  const int per_group = kGroupM * p.tiles_n;
  const int g = t / per_group, r = t % per_group;
  const int rows = min(kGroupM, cm - g * kGroupM);
  tm = (g * kGroupM + r % rows) * cluster;
  tn = r / rows;
}

__device__ __forceinline__ void store2(__nv_bfloat16* p, float a, float b) {
  *reinterpret_cast<__nv_bfloat162*>(p) = __floats2bfloat162_rn(a, b);
}
__device__ __forceinline__ void store2(__half* p, float a, float b) {
  *reinterpret_cast<__half2*>(p) = __floats2half2_rn(a, b);
}

// Byte offset of output element (row, col < 32) in a [64 rows x 64 B] staging box, 16-byte chunks
// swizzled as the tensor map's 64-byte mode expects (chunk index xor bits 1-2 of the row).
__device__ __forceinline__ uint32_t d_offset(int row, int col) {
  const int byte = col * 2;
  return row * 64 + ((((byte >> 4) ^ (row >> 1)) & 3) << 4) + (byte & 15);
}

__device__ __forceinline__ void tma_store_2d(const CUtensorMap* map, int x, int y, uint32_t src) {
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];" ::"l"(map), "r"(x),
               "r"(y), "r"(src)
               : "memory");
}
__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;" ::: "memory"); }
// Waits until at most one committed store still reads shared memory.
__device__ __forceinline__ void bulk_wait_read_1() { asm volatile("cp.async.bulk.wait_group.read 1;" ::: "memory"); }
__device__ __forceinline__ void bulk_wait() { asm volatile("cp.async.bulk.wait_group 0;" ::: "memory"); }
__device__ __forceinline__ void fence_async_shared() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }
__device__ __forceinline__ void wg_barrier(int id) { asm volatile("bar.sync %0, 128;" ::"r"(id) : "memory"); }

// How a consumer warpgroup runs its K loop.
enum class Loop {
  serial,   // one accumulator: a K block's MMAs are waited for before their promotion
  overlap,  // two accumulators: the next K block's MMAs are issued before this one is promoted
};

__device__ __forceinline__ uint32_t pack2(__nv_bfloat16*, float a, float b) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(a, b);
  return *reinterpret_cast<const uint32_t*>(&v);
}
__device__ __forceinline__ uint32_t pack2(__half*, float a, float b) {
  const __half2 v = __floats2half2_rn(a, b);
  return *reinterpret_cast<const uint32_t*>(&v);
}

template <class OutT, int kBN, int kStages, int kCluster, bool kTmaStore, Loop kLoop>
__global__ void __launch_bounds__(kThreads, 1)
    sm90_fp8_gemm_block(const __grid_constant__ CUtensorMap amap, const __grid_constant__ CUtensorMap bmap,
                        const __grid_constant__ CUtensorMap samap, const __grid_constant__ CUtensorMap dmap,
                        const Params p) {
  using T = Traits<kBN, kStages, kCluster, kTmaStore>;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  const uint32_t base = smem_u32(smem);
  const uint32_t full0 = pinned(base + T::kBarOff), empty0 = pinned(full0 + kStages * 8);

  const int wg = threadIdx.x / 128;  // 0: producer, 1..kConsumers: consumers
  const uint32_t rank = kCluster > 1 ? cluster_ctarank() : 0;
  const int cluster_id = blockIdx.x / kCluster, clusters = gridDim.x / kCluster;
  const int num_tiles = (p.tiles_m / kCluster) * p.tiles_n;

  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      mbar_init(full0 + 8 * s, 1);
      mbar_init(empty0 + 8 * s, T::kEmptyArrivals);
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  if constexpr (kCluster > 1) {
    cluster_sync();  // the peer's barriers exist before any multicast or remote arrival
  } else {
    __syncthreads();
  }
  griddep_wait();

  if (wg == 0) {
    setmaxnreg_dec<kProducerRegs>();
    if (threadIdx.x == 0) {
      int s = 0;
      uint32_t phase = 0;
      for (int t = cluster_id; t < num_tiles; t += clusters) {
        int tm, tn;
        tile_coords(p, t, kCluster, tm, tn);
        const int m0 = (tm + int(rank)) * kBM, n0 = tn * kBN;
        for (int kb = 0; kb < p.kblocks; ++kb) {
          mbar_wait(empty0 + 8 * s, phase ^ 1);
          const uint32_t full = full0 + 8 * s;
          mbar_expect_tx(full, T::kStageTx);
          tma_load_2d(base + T::kAOff + s * T::kATile, &amap, kb * kBK, m0, full);
          tma_load_2d(base + T::kSaOff + s * T::kSaTile, &samap, m0, kb, full);
          if constexpr (kCluster == 1) {
            tma_load_2d(base + T::kBOff + s * T::kBTile, &bmap, kb * kBK, n0, full);
          } else {
            constexpr int kHalf = kBN / 2;
            tma_load_2d_multicast(base + T::kBOff + s * T::kBTile + rank * kHalf * kBK, &bmap, kb * kBK,
                                  n0 + int(rank) * kHalf, full, uint16_t(0x3));
          }
          if (++s == kStages) s = 0, phase ^= 1;
        }
      }
    }
    __syncwarp();
    griddep_launch_dependents();
  } else {
    setmaxnreg_inc<kConsumerRegs>();
    constexpr int kRegs = kBN / 2;
    // A tile of a width dividing 128 starts on a weight scale block boundary and stays in it.
    constexpr bool kOneScaleBlock = 128 % kBN == 0;
    const int c = wg - 1;  // this warpgroup's 64-row half
    const int lane = threadIdx.x % 32, warp = (threadIdx.x / 32) % 4;
    const int r_lo = 16 * warp + lane / 4;  // rows r_lo and r_lo + 8 of the half
    // acc1: the second accumulator of the overlapped loop (unused, and optimized out, without it).
    float acc[kRegs], acc1[kRegs], total[kRegs];
#pragma unroll
    for (int i = 0; i < kRegs; ++i) acc[i] = 0.f, acc1[i] = 0.f;
    // Stage 0's sa address of this thread's rows and operand descriptors (a stage adds its offset).
    const uint32_t sa0 = pinned(base + T::kSaOff + (64 * c + r_lo) * 4);
    const uint64_t da0 = pinned(smem_desc(base + T::kAOff + c * 64 * kBK));
    const uint64_t db0 = pinned(smem_desc(base + T::kBOff));
    int s = 0;
    uint32_t phase = 0;
    uint32_t stored = 0;  // output boxes this warpgroup has stored
    // Waits for ring slot s, reads its sa and issues its MMAs into `a` (one commit group, not waited
    // for); returns the slot.
    auto issue = [&](float (&a)[kRegs], float& sa_lo, float& sa_hi) {
      const int slot = s;
      mbar_wait(full0 + 8 * slot, phase);
      const uint32_t sa_at = sa0 + slot * T::kSaTile;
      sa_lo = lds_f32(sa_at), sa_hi = lds_f32(sa_at + 8 * 4);
      const uint64_t da = da0 + uint64_t(slot * (T::kATile >> 4));
      const uint64_t db = db0 + uint64_t(slot * (T::kBTile >> 4));
#pragma unroll
      for (int i = 0; i < kRegs; ++i) fence_reg(a[i]);
      wgmma_fence();
#pragma unroll
      for (int k = 0; k < kBK / 32; ++k) Mma<kBN>::run(a, da + 2 * k, db + 2 * k, k);
      wgmma_commit();
      if (++s == kStages) s = 0, phase ^= 1;
      return slot;
    };
    // The MMAs of `slot` are complete: their a, b and sa are read, so the slot is released in every
    // block of the cluster.
    auto release = [&](float (&a)[kRegs], int slot) {
#pragma unroll
      for (int i = 0; i < kRegs; ++i) fence_reg(a[i]);
      if (lane == 0) {
        if constexpr (kCluster == 1) {
          mbar_arrive(empty0 + 8 * slot);
        } else {
#pragma unroll
          for (uint32_t q = 0; q < kCluster; ++q) mbar_arrive_cluster(empty0 + 8 * slot, q);
        }
      }
    };
    for (int t = cluster_id; t < num_tiles; t += clusters) {
      int tm, tn;
      tile_coords(p, t, kCluster, tm, tn);
      const int m0 = (tm + int(rank)) * kBM, n0 = tn * kBN;
      // sb of the (at most two) 128-row weight blocks the tile's columns span; columns from
      // `split` on belong to the second.
      const int nb0 = n0 / 128;
      const int split = min(kBN, (nb0 + 1) * 128 - n0);
      const float* sb0p = pinned(p.sb + int64_t(nb0) * p.sb_ld);
      const float* sb1p = pinned((split < kBN && (nb0 + 1) * 128 < p.n) ? sb0p + p.sb_ld : sb0p);
#pragma unroll
      for (int i = 0; i < kRegs; ++i) total[i] = 0.f;
      // sb of the next two K blocks, loaded ahead (a global load outlasts one K block's MMAs).
      const bool two = p.kblocks > 1;
      float sb0_next = __ldg(sb0p), sb1_next = kOneScaleBlock ? 0.f : __ldg(sb1p);
      float sb0_after = two ? __ldg(sb0p + 1) : 0.f, sb1_after = kOneScaleBlock || !two ? 0.f : __ldg(sb1p + 1);
      // total += a * sa * sb for K block kb; K block kb + 2's sb is loaded first (after the
      // release, so that the arrive never waits for the load).
      auto promote = [&](const float (&a)[kRegs], float sa_lo, float sa_hi, int kb) {
        const float sb0 = sb0_next, sb1 = sb1_next;
        sb0_next = sb0_after, sb1_next = sb1_after;
        if (kb + 2 < p.kblocks) {
          sb0_after = __ldg(sb0p + kb + 2);
          if (!kOneScaleBlock) sb1_after = __ldg(sb1p + kb + 2);
        }
        const float s00 = sa_lo * sb0, s10 = sa_hi * sb0, s01 = sa_lo * sb1, s11 = sa_hi * sb1;
#pragma unroll
        for (int j = 0; j < kBN / 8; ++j) {
          const bool second = !kOneScaleBlock && 8 * j >= split;
          const float lo = second ? s01 : s00, hi = second ? s11 : s10;
          total[4 * j + 0] = __fmaf_rn(a[4 * j + 0], lo, total[4 * j + 0]);
          total[4 * j + 1] = __fmaf_rn(a[4 * j + 1], lo, total[4 * j + 1]);
          total[4 * j + 2] = __fmaf_rn(a[4 * j + 2], hi, total[4 * j + 2]);
          total[4 * j + 3] = __fmaf_rn(a[4 * j + 3], hi, total[4 * j + 3]);
        }
      };
      if constexpr (kLoop == Loop::overlap) {
        // Two accumulators: K block kb + 1's MMAs are issued before kb's are waited for, so that
        // this warpgroup's MMAs keep running while it promotes. K blocks go in pairs (the loop
        // body issues into each accumulator once), so every wait names its accumulator statically.
        float lo0, hi0, lo1, hi1;
        int slot0 = issue(acc, lo0, hi0), kb = 0;
        for (; kb + 2 < p.kblocks; kb += 2) {
          const int slot1 = issue(acc1, lo1, hi1);
          wgmma_wait<1>();
          release(acc, slot0);
          promote(acc, lo0, hi0, kb);
          slot0 = issue(acc, lo0, hi0);
          wgmma_wait<1>();
          release(acc1, slot1);
          promote(acc1, lo1, hi1, kb + 1);
        }
        if (kb + 1 < p.kblocks) {
          const int slot1 = issue(acc1, lo1, hi1);
          wgmma_wait<1>();
          release(acc, slot0);
          promote(acc, lo0, hi0, kb);
          wgmma_wait<0>();
          release(acc1, slot1);
          promote(acc1, lo1, hi1, kb + 1);
        } else {
          wgmma_wait<0>();
          release(acc, slot0);
          promote(acc, lo0, hi0, kb);
        }
      } else {
        // One accumulator: each K block's MMAs are waited for before their promotion; the other
        // warpgroup's MMAs may run meanwhile.
        for (int kb = 0; kb < p.kblocks; ++kb) {
          float sa_lo, sa_hi;
          const int slot = issue(acc, sa_lo, sa_hi);
          wgmma_wait<0>();
          release(acc, slot);
          promote(acc, sa_lo, sa_hi, kb);
        }
      }
      const OutT* bias = static_cast<const OutT*>(p.bias);
      if constexpr (kTmaStore) {
        // Epilogue: (+ bias) rounded to OutT, 32 columns at a time, into this warpgroup's two staging
        // boxes in turn, each stored by the tensor memory accelerator (which drops rows and columns
        // past the matrix) while the next is written. A box is rewritten once its previous store
        // has read it.
        const bool leader = threadIdx.x % 128 == 0;
#pragma unroll
        for (int b = 0; b < kBN / 32; ++b, ++stored) {
          const uint32_t box = base + T::kDOff + c * T::kDHalf + (stored & 1) * T::kDBox;
          if (leader) bulk_wait_read_1();
          wg_barrier(1 + c);
#pragma unroll
          for (int jj = 0; jj < 4; ++jj) {
            const int j = 4 * b + jj, col = 8 * jj + 2 * (lane % 4);
            float b0 = 0.f, b1 = 0.f;
            if (bias) {
              const int n = n0 + 32 * b + col;
              if (n < p.n) b0 = to_float(bias[n]);
              if (n + 1 < p.n) b1 = to_float(bias[n + 1]);
            }
#pragma unroll
            for (int h = 0; h < 2; ++h) {
              const uint32_t v =
                  pack2(static_cast<OutT*>(nullptr), total[4 * j + 2 * h] + b0, total[4 * j + 2 * h + 1] + b1);
              asm volatile("st.shared.u32 [%0], %1;" ::"r"(box + d_offset(r_lo + 8 * h, col)), "r"(v) : "memory");
            }
          }
          fence_async_shared();
          wg_barrier(1 + c);
          if (leader) {
            tma_store_2d(&dmap, n0 + 32 * b, m0 + 64 * c, box);
            bulk_commit();
          }
        }
      } else {
        // Epilogue: (+ bias) rounded to OutT, straight from the registers.
        OutT* out = static_cast<OutT*>(p.out);
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int m = m0 + 64 * c + r_lo + 8 * h;
          if (m >= p.m) continue;
          OutT* row = out + int64_t(m) * p.ldo;
#pragma unroll
          for (int j = 0; j < kBN / 8; ++j) {
            const int n = n0 + 8 * j + 2 * (lane % 4);
            float v0 = total[4 * j + 2 * h], v1 = total[4 * j + 2 * h + 1];
            if (n + 1 < p.n) {
              if (bias) v0 += to_float(bias[n]), v1 += to_float(bias[n + 1]);
              store2(row + n, v0, v1);
            } else if (n < p.n) {
              if (bias) v0 += to_float(bias[n]);
              store_out(v0, row + n);
            }
          }
        }
      }
    }
    if constexpr (kTmaStore) {
      if (threadIdx.x % 128 == 0) bulk_wait();  // the last tile's store is complete before exit
    }
  }
  if constexpr (kCluster > 1) cluster_sync();  // peers may still arrive on this block's barriers
}

}  // namespace fp8route::kernels::block
