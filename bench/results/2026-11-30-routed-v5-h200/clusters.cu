// Diagnostic, not built by CMake: how many thread-block clusters of 1, 2, 4, 8 and 16 CTAs fit on
// this GPU at once, with one CTA per SM (a GEMM kernel's shared memory), by
// cudaOccupancyMaxActiveClusters. H200s have 132 of 144 SMs enabled, and which ones differ per chip:
// a GPC with an odd number of SMs leaves one idle under clusters of 2, so the count of whole clusters
// (and so the speed of a kernel launched with a cluster shape, as CUTLASS's 2x1x1 tiles and some
// cuBLASLt algorithms are) can differ between two H200s. Printed to fingerprint the chip next to its
// benchmarks.
// Build: nvcc -std=c++17 -arch=sm_90a bench/results/2026-11-30-routed-v5-h200/clusters.cu -o clusters
#include <cuda_runtime.h>

#include <cstdio>

__global__ void one_cta_per_sm(int* p) {
  extern __shared__ int s[];
  if (p) p[blockIdx.x] = s[threadIdx.x];
}

int main() {
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) return std::printf("no GPU\n"), 1;
  const int smem = static_cast<int>(prop.sharedMemPerBlockOptin);  // the most one CTA may take: one per SM
  cudaFuncSetAttribute(one_cta_per_sm, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  cudaFuncSetAttribute(one_cta_per_sm, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
  std::printf("%s, %d SMs, %d bytes of shared memory per CTA\n", prop.name, prop.multiProcessorCount, smem);
  for (int size : {1, 2, 4, 8, 16}) {
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = dim3(size * 64);
    cfg.blockDim = dim3(128);
    cfg.dynamicSmemBytes = smem;
    cudaLaunchAttribute attr{};
    attr.id = cudaLaunchAttributeClusterDimension;
    attr.val.clusterDim.x = size, attr.val.clusterDim.y = 1, attr.val.clusterDim.z = 1;
    cfg.attrs = &attr, cfg.numAttrs = 1;
    int clusters = 0;
    const cudaError_t e = cudaOccupancyMaxActiveClusters(&clusters, one_cta_per_sm, &cfg);
    if (e != cudaSuccess) std::printf("cluster %2d: %s\n", size, cudaGetErrorString(e));
    else std::printf("cluster %2d: %3d active clusters, %3d SMs busy, %3d idle\n", size, clusters,
                     clusters * size, prop.multiProcessorCount - clusters * size);
  }
  return 0;
}
