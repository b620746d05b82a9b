#pragma once
// The warpgroup MMA of the grouped prefill kernel (moe/wgmma/kernel.cuh): the dense block-scaled
// kernel's helpers (gemm/block/wgmma.cuh) and its m64n128k32 e4m3 x e4m3 -> f32 MMA
// (gemm/block/mma.cuh), both operands K-major in shared memory. Accumulator layout: register
// 4j + 2h + e holds row 16 * warp + lane / 4 + 8h, column 8j + 2 * (lane % 4) + e.

#include <cstdint>

#include "gemm/block/mma.cuh"
#include "gemm/block/wgmma.cuh"

namespace fp8route::kernels::moe_wgmma {

using block::fence_reg;
using block::setmaxnreg_dec;
using block::setmaxnreg_inc;
using block::smem_desc;
using block::wgmma_commit;
using block::wgmma_fence;

__device__ __forceinline__ void wgmma_wait0() { block::wgmma_wait<0>(); }

// d (+)= a * b over one 32-wide K step; scale_d == 0 writes d = a * b.
__device__ __forceinline__ void mma_m64n128k32(float (&d)[64], uint64_t da, uint64_t db, int scale_d) {
  block::Mma<128>::run(d, da, db, scale_d);
}

}  // namespace fp8route::kernels::moe_wgmma
