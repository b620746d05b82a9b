#pragma once
// Device parts of the decode kernels, shared by the dense one (gemm/decode/kernel.cuh) and the
// grouped one (moe/decode/kernel.cuh), which is the dense kernel with an expert dimension: the
// block shape, the tile sizes, the ring's barriers, one K block's swap-AB MMAs, the fp32 sum over
// K blocks, the walk over a thread's accumulator fragments and the cluster split-K reduction.

#include <cstdint>

#include "gemm/sm90.cuh"

namespace fp8route::kernels::decode {

inline constexpr int kConsumerWarps = 4;
inline constexpr int kThreads = (kConsumerWarps + 1) * 32;  // + the producer warp
inline constexpr int kKBlock = 128;                         // bytes of K per stage = the scale block
inline constexpr int kMaxSplits = 8;                        // portable cluster size
// Shared memory for the block-scale slices of a split's K range (sa and sb); each launcher keeps
// the K slices short enough to fit.
inline constexpr int kSaBytes = 16 * 1024;
inline constexpr int kSbBytes = 4 * 1024;

// A block of kRows weight rows (kRowTilesPerWarp 16-row tiles per consumer warp) by kMaxM tokens
// (kTokenTiles 8-token tiles); one ring stage holds one 128-wide K block of each.
template <int kTokenTiles, int kRowTilesPerWarp>
struct Tiles {
  static constexpr int kMaxM = 8 * kTokenTiles;
  static constexpr int kRows = 16 * kRowTilesPerWarp * kConsumerWarps;
  static constexpr int kWeightTile = kRows * kKBlock;
  static constexpr int kActTile = kMaxM * kKBlock;
  static constexpr int kRedLd = kRows + 4;  // fp32 sums [kMaxM][kRedLd] for the split reduction
  static constexpr int kRedBytes = kMaxM * kRedLd * 4;
};

// Thread 0 initializes the ring: slot s's full barrier completes on the producer's arrival and the
// bytes of its loads, its empty barrier once every consumer warp has read the slot.
__device__ __forceinline__ void init_ring(uint32_t full0, uint32_t empty0, int stages) {
  if (threadIdx.x == 0) {
    for (int s = 0; s < stages; ++s) {
      mbar_init(full0 + 8 * s, 1);
      mbar_init(empty0 + 8 * s, kConsumerWarps);
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
}

template <int RT, int NT>
__device__ __forceinline__ void zero(float (&v)[RT][NT][4]) {
#pragma unroll
  for (int r = 0; r < RT; ++r)
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) v[r][j][e] = 0.f;
}

// ldmatrix lane roles: weight tile rows (two 8-row halves) and chunk pairs; token rows.
struct MmaLanes {
  int a_row, a_chunk, b_row, b_chunk;
};
__device__ __forceinline__ MmaLanes mma_lanes(int lane) {
  return {(lane & 7) + ((lane >> 3) & 1) * 8, lane >> 4, lane & 7, lane >> 3};
}

// One ring stage's products: part = this warp's RT weight tiles (from row tile0 of the stage's
// weight tile wt) times the first nt token tiles of its activation tile at; token tiles past nt
// are neither loaded nor multiplied. The caller declares the fragment registers b and a: arrays
// local to an inlined function would reorder the kernel's local arrays, and with them the dense
// kernel's PTX register numbering.
template <int RT, int NT>
__device__ __forceinline__ void mma_stage(float (&part)[RT][NT][4], uint32_t wt, uint32_t at, int tile0,
                                          const MmaLanes& l, int nt, uint32_t (&b)[NT][4], uint32_t (&a)[4]) {
  zero(part);
#pragma unroll
  for (int kp = 0; kp < 2; ++kp) {  // two 32-wide k steps per 64 bytes
#pragma unroll
    for (int j = 0; j < NT; ++j)
      if (j < nt) ldmatrix_x4(b[j], swz(at, 8 * j + l.b_row, 4 * kp + l.b_chunk));
#pragma unroll
    for (int ks = 0; ks < 2; ++ks) {
#pragma unroll
      for (int r = 0; r < RT; ++r) {
        ldmatrix_x4(a, swz(wt, tile0 + 16 * r + l.a_row, 2 * (2 * kp + ks) + l.a_chunk));
#pragma unroll
        for (int j = 0; j < NT; ++j)
          if (j < nt) mma_e4m3(part[r][j], a, b[j][2 * ks], b[j][2 * ks + 1]);
      }
    }
  }
}

// The sum over K blocks, in fp32 registers outside the tensor core: acc += part (tensor and row
// scales multiply the whole sum later), or with block scales part times sa * sb of the K block.
template <int RT, int NT>
__device__ __forceinline__ void accumulate(float (&acc)[RT][NT][4], const float (&part)[RT][NT][4]) {
#pragma unroll
  for (int r = 0; r < RT; ++r)
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[r][j][e] += part[r][j][e];
}
// Block scales: sa_s [K block][sa_ld] (token m past sa_ld: 0) and sb_s [128-row block][nk] of
// the block's K slice, K block i of it; the block's rows start at row0, the warp's at tile0.
template <int RT, int NT>
__device__ __forceinline__ void accumulate_scaled(float (&acc)[RT][NT][4], const float (&part)[RT][NT][4],
                                                  const float* sa_s, int sa_ld, const float* sb_s, int nk, int i,
                                                  int row0, int tile0, int t) {
#pragma unroll
  for (int r = 0; r < RT; ++r) {
    const int nb_local = (row0 + tile0 + 16 * r) / 128 - row0 / 128;
    const float sbv = sb_s[nb_local * nk + i];
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int m = 8 * j + 2 * t + (e & 1);
        const float sav = m < sa_ld ? sa_s[i * sa_ld + m] : 0.f;
        acc[r][j][e] = __fmaf_rn(part[r][j][e], sav * sbv, acc[r][j][e]);
      }
  }
}

// Split K, consumers: the block's sums into red [kMaxM][kRedLd] (the ring, free once every stage
// was consumed), after a barrier of the consumer warps.
template <int kRedLd, int RT, int NT>
__device__ __forceinline__ void write_sums(float* red, const float (&acc)[RT][NT][4], int g, int t, int tile0) {
  asm volatile("bar.sync 1, %0;" ::"n"(kConsumerWarps * 32));
#pragma unroll
  for (int r = 0; r < RT; ++r)
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        red[(8 * j + 2 * t + (e & 1)) * kRedLd + tile0 + 16 * r + g + (e >= 2 ? 8 : 0)] = acc[r][j][e];
}

// Split K, all threads of the block, after the cluster barrier that follows write_sums: this
// block's share [first, last) of the [m_count x rows] outputs (index m * rows + r), rows being
// those of the block from row0 (of n), and an output's sum over the splits' red in rank order
// through distributed shared memory (deterministic).
struct SplitShare {
  int rows, first, last;
};
template <int kRows>
__device__ __forceinline__ SplitShare split_share(int n, int row0, int m_count, int splits) {
  const int rows = min(kRows, n - row0), count = m_count * rows;
  const int per = (count + splits - 1) / splits;
  const int first = blockIdx.y * per, last = min(count, first + per);
  return {rows, first, last};
}
template <int kRedLd>
__device__ __forceinline__ float peer_sum(uint32_t red, int m, int r, int splits) {
  const uint32_t addr = red + (m * kRedLd + r) * 4;
  float v = 0.f;
  for (int q = 0; q < splits; ++q) v += ld_peer_f32(addr, q);
  return v;
}

}  // namespace fp8route::kernels::decode
