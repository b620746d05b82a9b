#pragma once
// Thread block cluster launches (SM90): the launch configuration with the cluster dimension
// attribute (ClusterLaunch), for cudaLaunchKernelEx (launch_cluster) and for occupancy queries
// (cudaOccupancyMaxActiveClusters).

#include <cuda_runtime.h>  // the templated cudaLaunchKernelEx

#include <utility>

#include "core/cuda_check.h"

namespace fp8route {

// A cudaLaunchConfig_t with one attribute, the cluster dimension; `config` points at `attr`, so
// the object is neither copied nor moved.
struct ClusterLaunch {
  cudaLaunchConfig_t config{};
  cudaLaunchAttribute attr{};

  ClusterLaunch(dim3 grid, dim3 block, dim3 cluster, size_t smem, cudaStream_t stream) {
    config.gridDim = grid;
    config.blockDim = block;
    config.dynamicSmemBytes = smem;
    config.stream = stream;
    attr.id = cudaLaunchAttributeClusterDimension;
    attr.val.clusterDim.x = cluster.x;
    attr.val.clusterDim.y = cluster.y;
    attr.val.clusterDim.z = cluster.z;
    config.attrs = &attr;
    config.numAttrs = 1;
  }
  ClusterLaunch(const ClusterLaunch&) = delete;
  ClusterLaunch& operator=(const ClusterLaunch&) = delete;
};

template <class... KernelArgs, class... Args>
void launch_cluster(void (*kernel)(KernelArgs...), dim3 grid, dim3 block, dim3 cluster, size_t smem,
                    cudaStream_t stream, Args&&... args) {
  ClusterLaunch l(grid, block, cluster, smem, stream);
  FP8ROUTE_CUDA_CHECK(cudaLaunchKernelEx(&l.config, kernel, std::forward<Args>(args)...));
}

}  // namespace fp8route
