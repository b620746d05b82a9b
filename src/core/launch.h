#pragma once
// Kernel launches through cudaLaunchKernelEx with the attributes fp8route uses: a thread block
// cluster shape (SM90), and programmatic dependent launch (PDL), which lets a kernel start while the
// previous kernel in the stream finishes. A kernel launched with PDL must execute
// griddepcontrol.wait before it reads anything the previous kernel may write; it works inside
// CUDA graphs (the capture records a programmatic edge). Also the per-kernel set-up launches need:
// the dynamic shared memory opt-in, and how many blocks of a cluster shape fit the GPU at once.

#include <cuda_runtime.h>  // the templated cudaLaunchKernelEx

#include <map>
#include <mutex>
#include <utility>

#include "fp8route/tuning/cuda_check.h"
#include "fp8route/device.h"

namespace fp8route {

struct LaunchShape {
  dim3 grid, block;
  size_t smem = 0;
  dim3 cluster{0, 0, 0};  // 0x0x0: no cluster attribute
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
  if (s.cluster.x * s.cluster.y * s.cluster.z > 0) {
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

// Above 48 KB of dynamic shared memory a kernel needs an opt-in, once per kernel and device (the
// current one).
inline void allow_dynamic_smem(const void* kernel, int bytes, int device) {
  static std::mutex mu;
  static std::map<std::pair<const void*, int>, bool> done;
  std::lock_guard<std::mutex> lock(mu);
  if (done.emplace(std::pair{kernel, device}, true).second) {
    const cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
    if (e != cudaSuccess) done.erase({kernel, device});
    FP8ROUTE_CUDA_CHECK(e);
  }
}

// Blocks of `kernel` resident on the whole GPU at once when launched in clusters of `cluster`
// blocks (along y) of `threads` threads and `smem` bytes: a cluster's blocks must share a GPC, so
// this can be fewer than blocks per SM x SMs.
inline int resident_cluster_blocks(const void* kernel, int threads, size_t smem, int cluster) {
  cudaLaunchConfig_t config{};
  cudaLaunchAttribute attr{};
  config.gridDim = dim3(1, cluster);
  config.blockDim = dim3(threads);
  config.dynamicSmemBytes = smem;
  attr.id = cudaLaunchAttributeClusterDimension;
  attr.val.clusterDim.x = 1, attr.val.clusterDim.y = cluster, attr.val.clusterDim.z = 1;
  config.attrs = &attr;
  config.numAttrs = 1;
  int clusters = 0;
  FP8ROUTE_CUDA_CHECK(cudaOccupancyMaxActiveClusters(&clusters, kernel, &config));
  return clusters * cluster;
}

}  // namespace fp8route
