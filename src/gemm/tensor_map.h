#pragma once
// Tensor maps (TMA descriptors) for the hand-written SM90 kernels, encoded through the driver entry
// point the runtime hands out (no link to libcuda).

#include <cuda.h>  // CUtensorMap

#include <cstdint>
#include <string>

namespace fp8route::gemm {

// A [rows, cols] byte matrix (row stride ld bytes, a multiple of 16), read in [box_rows x 128 B]
// boxes with the 128-byte swizzle; reads past either edge are zero-filled. `who` names the caller
// in the error thrown when the driver refuses the map.
CUtensorMap byte_matrix_map(const void* ptr, int64_t rows, int64_t cols, int64_t ld, int box_rows,
                            const std::string& who);

// A [rows, cols] fp32 matrix (row stride ld elements, a multiple of 4), read in [1 x box_cols]
// boxes without swizzle; reads past either edge are zero-filled.
CUtensorMap float_matrix_map(const float* ptr, int64_t rows, int64_t cols, int64_t ld, int box_cols,
                             const std::string& who);

// A [rows, cols] matrix of 2-byte elements (row stride ld elements, a multiple of 8), written (or
// read) in [box_rows x box_cols] boxes of 64-byte rows (box_cols = 32) with the 64-byte swizzle;
// accesses past either edge are dropped (reads: zero-filled).
CUtensorMap half_matrix_map(const void* ptr, int64_t rows, int64_t cols, int64_t ld, int box_rows,
                            const std::string& who);

// A [batches, rows, cols] byte tensor (contiguous), read in [box_rows x 128 B] boxes of one batch
// with the 128-byte swizzle: rows past `rows` are zero-filled, so a box at one batch's last rows
// never reads the next batch's (the grouped GEMMs' expert weights [E, N, K]).
CUtensorMap batched_byte_matrix_map(const void* ptr, int64_t batches, int64_t rows, int64_t cols, int box_rows,
                                    const std::string& who);

}  // namespace fp8route::gemm
