#pragma once
// Device side of programmatic dependent launch (core/launch.h): a kernel launched with PDL may
// start while the previous kernel in the stream still runs, so it executes griddep_wait() before
// it reads anything that kernel may write (or writes anything it may read); griddep_launch_dependents()
// lets the next PDL kernel start early. Both are no-ops for a launch without the attribute.

namespace fp8route::kernels {

__device__ __forceinline__ void griddep_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
__device__ __forceinline__ void griddep_launch_dependents() {
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}

}  // namespace fp8route::kernels
