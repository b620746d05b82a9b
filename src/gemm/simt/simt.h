#pragma once
// The GEMM backend routed as "reference": a simple tiled CUDA-core (SIMT) kernel, correct for every
// valid problem (any M, N, K, any alignment, every scale kind). Also the GPU reference of the tests;
// the CPU reference of the arithmetic is src/reference.

#include <cuda_runtime_api.h>

#include <cstdint>

#include "gemm/backend.h"

namespace fp8route::gemm {

// Computes the rows rows[0..num_rows) of y (rows == nullptr: rows 0..num_rows) into
// out_f32[num_rows, N] (row stride N) without output rounding: for tests that check a large
// problem on a sample of rows. ops.out and ops.ldo are ignored.
void simt_rows_f32(const GemmProblem& p, const GemmOperands& ops, const int32_t* rows,
                   int64_t num_rows, float* out_f32, cudaStream_t stream);

}  // namespace fp8route::gemm
