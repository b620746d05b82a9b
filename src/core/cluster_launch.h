#pragma once
// A kernel launch with a thread block cluster (SM90): cudaLaunchKernelEx with the cluster
// dimension attribute, checked like every other launch.

#include <cuda_runtime.h>  // the templated cudaLaunchKernelEx

#include <utility>

#include "core/cuda_check.h"

namespace fp8route {

template <class... KernelArgs, class... Args>
void launch_cluster(void (*kernel)(KernelArgs...), dim3 grid, dim3 block, dim3 cluster, size_t smem,
                    cudaStream_t stream, Args&&... args) {
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeClusterDimension;
  attr.val.clusterDim.x = cluster.x;
  attr.val.clusterDim.y = cluster.y;
  attr.val.clusterDim.z = cluster.z;
  config.attrs = &attr;
  config.numAttrs = 1;
  FP8ROUTE_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...));
}

}  // namespace fp8route
