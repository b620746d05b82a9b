#pragma once
// Kernel launches through cudaLaunchKernelEx with the attributes fp8route uses: a thread block
// cluster shape, and programmatic dependent launch (PDL), which lets a kernel start while the
// previous kernel in the stream finishes. A kernel launched with PDL must execute
// griddepcontrol.wait before it reads anything the previous kernel may write; it works inside
// CUDA graphs (the capture records a programmatic edge).

#include <cuda_runtime.h>  // the templated cudaLaunchKernelEx

#include <utility>

#include "core/cuda_check.h"
#include "fp8route/device.h"

namespace fp8route {

struct LaunchShape {
  dim3 grid, block;
  size_t smem = 0;
  dim3 cluster{1, 1, 1};  // 1x1x1: no cluster attribute
  bool pdl = false;       // programmatic stream serialization (when programmatic_dependent_launch())
};

template <class... KernelArgs, class... Args>
void launch_kernel(void (*kernel)(KernelArgs...), const LaunchShape& s, cudaStream_t stream, Args&&... args) {
  cudaLaunchConfig_t config{};
  cudaLaunchAttribute attrs[2]{};
  config.gridDim = s.grid;
  config.blockDim = s.block;
  config.dynamicSmemBytes = s.smem;
  config.stream = stream;
  unsigned n = 0;
  if (s.cluster.x * s.cluster.y * s.cluster.z > 1) {
    attrs[n].id = cudaLaunchAttributeClusterDimension;
    attrs[n].val.clusterDim.x = s.cluster.x;
    attrs[n].val.clusterDim.y = s.cluster.y;
    attrs[n].val.clusterDim.z = s.cluster.z;
    ++n;
  }
  if (s.pdl && programmatic_dependent_launch()) {
    attrs[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attrs[n].val.programmaticStreamSerializationAllowed = 1;
    ++n;
  }
  config.attrs = attrs;
  config.numAttrs = n;
  FP8ROUTE_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...));
}

}  // namespace fp8route
