#pragma once
// Block scale_a in a layout the GEMM kernels cannot read in place, gathered into the one they read.
// Every block backend reads scale_a as the physical [ceil(K/128), align(M, 4)] M-major buffer (TMA
// boxes and the decode kernel's shared-memory copy span the align(M, 4) padding too). An
// [M, ceil(K/128)] view of other memory, the K-major tensor per-token-group quantization writes
// row-major or an M-major buffer whose row stride is not align(M, 4), is copied into that form.

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

namespace fp8route::gemm {

// Enqueues on `stream` the gather of src (f32; element (m, j) at src[m * stride_m + j * stride_k],
// m < M, j < kb; any strides) into scratch of the stream, or of the graph being captured
// (core/workspace.h), as [kb, align(M, 4)] with the padding columns zero; returns that scratch.
// M >= 1 and kb >= 1, on the current device.
const float* stage_block_scale_a(const float* src, int64_t stride_m, int64_t stride_k, int64_t m, int64_t kb,
                                 cudaStream_t stream, const std::string& who);

}  // namespace fp8route::gemm
