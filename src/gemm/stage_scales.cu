// The gather of gemm/stage_scales.h: one thread per element of the [kb, align(M, 4)] result, so the
// writes are coalesced; the reads follow the source's strides (K-major sources are read with a
// stride of kb floats, a few hundred KB at most per call).

#include "gemm/stage_scales.h"

#include <algorithm>

#include "fp8route/tuning/cuda_check.h"
#include "core/workspace.h"

namespace fp8route::gemm {
namespace {

__global__ void gather_block_scale_a(const float* __restrict__ src, int64_t stride_m, int64_t stride_k, int64_t m,
                                     int64_t ld, int64_t total, float* __restrict__ dst) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t j = i / ld, r = i - j * ld;
    dst[i] = r < m ? src[r * stride_m + j * stride_k] : 0.0f;
  }
}

}  // namespace

const float* stage_block_scale_a(const float* src, int64_t stride_m, int64_t stride_k, int64_t m, int64_t kb,
                                 cudaStream_t stream, const std::string& who) {
  const int64_t ld = (m + 3) / 4 * 4, total = kb * ld;
  int device = 0;
  FP8ROUTE_CUDA_CHECK(cudaGetDevice(&device));
  // Per stream, or per captured graph: the gather and the GEMM that reads it are ordered on
  // `stream`, and the next call's gather (a launch without PDL) starts after that GEMM has finished.
  static Workspaces scratch{"gathered block scale_a"};
  auto* dst = static_cast<float*>(scratch.get(device, size_t(total) * sizeof(float), stream, who));
  constexpr int kThreads = 256;
  const int64_t blocks = std::min<int64_t>((total + kThreads - 1) / kThreads, 4096);
  gather_block_scale_a<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(src, stride_m, stride_k, m, ld, total,
                                                                               dst);
  FP8ROUTE_CHECK_LAUNCH();
  return dst;
}

}  // namespace fp8route::gemm
