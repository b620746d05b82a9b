#include "gemm/tensor_map.h"

#include <cudaTypedefs.h>  // PFN_cuTensorMapEncodeTiled
#include <cuda_runtime_api.h>

#include "fp8route/tuning/cuda_check.h"
#include "fp8route/error.h"

namespace fp8route::gemm {
namespace {

// cuTensorMapEncodeTiled from the driver, fetched once through the runtime.
PFN_cuTensorMapEncodeTiled_v12000 encode_fn() {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult q{};
    FP8ROUTE_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &q));
    FP8ROUTE_CHECK_CAT(q == cudaDriverEntryPointSuccess && f != nullptr, ErrorCategory::cuda_error,
                       "the CUDA driver has no cuTensorMapEncodeTiled");
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(f);
  }();
  return fn;
}

CUtensorMap encode_2d(CUtensorMapDataType type, const void* ptr, int64_t rows, int64_t cols, int64_t ld_bytes,
                      int box_cols, int box_rows, CUtensorMapSwizzle swizzle, const std::string& who) {
  CUtensorMap map{};
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(ld_bytes)};
  const cuuint32_t box[2] = {static_cast<cuuint32_t>(box_cols), static_cast<cuuint32_t>(box_rows)};
  const cuuint32_t elem[2] = {1, 1};
  const CUresult r = encode_fn()(&map, type, 2, const_cast<void*>(ptr), dims, strides, box, elem,
                                 CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                                 CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  FP8ROUTE_CHECK_CAT(r == CUDA_SUCCESS, ErrorCategory::cuda_error,
                     who << ": cuTensorMapEncodeTiled failed (" << int(r) << ") for a [" << rows << ", " << cols
                         << "] matrix, row stride " << ld_bytes << " bytes");
  return map;
}

}  // namespace

CUtensorMap byte_matrix_map(const void* ptr, int64_t rows, int64_t cols, int64_t ld, int box_rows,
                            const std::string& who) {
  return encode_2d(CU_TENSOR_MAP_DATA_TYPE_UINT8, ptr, rows, cols, ld, 128, box_rows, CU_TENSOR_MAP_SWIZZLE_128B,
                   who);
}

CUtensorMap float_matrix_map(const float* ptr, int64_t rows, int64_t cols, int64_t ld, int box_cols,
                             const std::string& who) {
  return encode_2d(CU_TENSOR_MAP_DATA_TYPE_FLOAT32, ptr, rows, cols, ld * 4, box_cols, 1, CU_TENSOR_MAP_SWIZZLE_NONE,
                   who);
}

CUtensorMap half_matrix_map(const void* ptr, int64_t rows, int64_t cols, int64_t ld, int box_rows,
                            const std::string& who) {
  return encode_2d(CU_TENSOR_MAP_DATA_TYPE_UINT16, ptr, rows, cols, ld * 2, 32, box_rows, CU_TENSOR_MAP_SWIZZLE_64B,
                   who);
}

CUtensorMap batched_byte_matrix_map(const void* ptr, int64_t batches, int64_t rows, int64_t cols, int box_rows,
                                    const std::string& who) {
  CUtensorMap map{};
  const cuuint64_t dims[3] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows),
                              static_cast<cuuint64_t>(batches)};
  const cuuint64_t strides[2] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows * cols)};
  const cuuint32_t box[3] = {128, static_cast<cuuint32_t>(box_rows), 1};
  const cuuint32_t elem[3] = {1, 1, 1};
  const CUresult r = encode_fn()(&map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 3, const_cast<void*>(ptr), dims, strides, box,
                                 elem, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                 CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  FP8ROUTE_CHECK_CAT(r == CUDA_SUCCESS, ErrorCategory::cuda_error,
                     who << ": cuTensorMapEncodeTiled failed (" << int(r) << ") for a [" << batches << ", " << rows
                         << ", " << cols << "] byte tensor");
  return map;
}

}  // namespace fp8route::gemm
