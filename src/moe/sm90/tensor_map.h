#pragma once
// Tensor maps of the SM90 grouped kernels beyond gemm/tensor_map.h's 2-D ones.

#include <cuda.h>  // CUtensorMap

#include <cstdint>
#include <string>

namespace fp8route::moe {

// The expert weights b [E, N, K] (bytes, contiguous) as a 3-D map read in [box_rows x 128 B] boxes
// of one expert with the 128-byte swizzle: rows past N are zero-filled, so a box at an expert's
// last rows never reads the next expert's. `who` names the caller in the error thrown when the
// driver refuses the map.
CUtensorMap expert_weight_map(const void* b, int64_t experts, int64_t n, int64_t k, int box_rows,
                              const std::string& who);

}  // namespace fp8route::moe
