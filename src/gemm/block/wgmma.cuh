#pragma once
// Device helpers of the warpgroup MMA kernels (the dense block-scaled kernel, gemm/block/kernel.cuh,
// and the grouped prefill kernel, moe/wgmma/kernel.cuh): shared-memory matrix descriptors, the MMA
// fences and waits, register reconfiguration.

#include <cstdint>

namespace fp8route::kernels::block {

// Descriptor of a K-major operand tile in shared memory with the 128-byte swizzle: 128-byte rows,
// 8-row (1024-byte) core matrix groups; start address in 16-byte units. Adding 2 moves 32 bytes
// along K within the swizzled rows.
__device__ __forceinline__ uint64_t smem_desc(uint32_t addr) {
  return uint64_t((addr & 0x3FFFF) >> 4) | (uint64_t(1) << 16) | (uint64_t(1024 >> 4) << 32) | (uint64_t(1) << 62);
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
// Waits until at most kPending of this warpgroup's committed MMA groups are still running.
template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(kPending) : "memory");
}
// Keeps the compiler from moving accesses of an accumulator register across the asynchronous MMA.
__device__ __forceinline__ void fence_reg(float& r) { asm volatile("" : "+f"(r)::"memory"); }
// Makes a loop-invariant value opaque, so that the compiler keeps it in a register instead of
// recomputing it (and the chain it came from) in every iteration of the K loop.
template <class V>
__device__ __forceinline__ V pinned(V v) {
  if constexpr (sizeof(V) == 8) asm volatile("" : "+l"(v));
  else asm volatile("" : "+r"(v));
  return v;
}
__device__ __forceinline__ float lds_f32(uint32_t addr) {
  float v;
  asm volatile("ld.shared.f32 %0, [%1];" : "=f"(v) : "r"(addr) : "memory");
  return v;
}

template <int kRegs>
__device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(kRegs));
}
template <int kRegs>
__device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(kRegs));
}

}  // namespace fp8route::kernels::block
