#pragma once
// Device parts shared by the SM90 grouped kernels (moe/decode, moe/wgmma): the groups' helpers
// (moe/groups.cuh), the arguments they all take, and a 3-D TMA load (the weight [E, N, K] read per
// expert, so a box never reaches into the next expert's rows).

#include <cuda.h>  // CUtensorMap

#include <cstdint>

#include "gemm/sm90.cuh"
#include "moe/groups.cuh"

namespace fp8route::kernels::moe {

// The arguments every SM90 grouped kernel takes; a kernel's Params add their own.
struct GroupedArgs {
  Groups g;
  BlockScaleA bsa;  // block scales
  const float* sa;  // tensor / row scales: [1] or [E]; [rows of a]
  const float* sb;  // [E] | [E, N] | [E, ceil(N/128), kblocks]
  void* out;        // OutT [rows of a, N]
  int n;
  int kblocks;         // K / 128 rounded up
  int scale_kind;      // 0 tensor, 1 row, 2 block
  bool sa_per_expert;  // tensor: sa [E]
};

// A [box rows x 128 B] box at (x bytes, y rows, z expert) of a 3-D byte tensor map into shared
// memory, completing its bytes on `bar`; rows past the expert's N arrive as zeros.
__device__ __forceinline__ void tma_load_3d(uint32_t dst, const CUtensorMap* map, int x, int y, int z, uint32_t bar,
                                            uint64_t policy) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint"
      " [%0], [%1, {%2, %3, %4}], [%5], %6;" ::"r"(dst),
      "l"(map), "r"(x), "r"(y), "r"(z), "r"(bar), "l"(policy)
      : "memory");
}

// The same without a cache hint.
__device__ __forceinline__ void tma_load_3d(uint32_t dst, const CUtensorMap* map, int x, int y, int z, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3, %4}], [%5];" ::"r"(dst),
      "l"(map), "r"(x), "r"(y), "r"(z), "r"(bar)
      : "memory");
}

}  // namespace fp8route::kernels::moe
