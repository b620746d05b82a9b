#include "moe/sm90/tensor_map.h"

#include <cudaTypedefs.h>  // PFN_cuTensorMapEncodeTiled
#include <cuda_runtime_api.h>

#include "core/cuda_check.h"
#include "fp8route/error.h"

namespace fp8route::moe {
namespace {

// cuTensorMapEncodeTiled from the driver, fetched once through the runtime (no link to libcuda),
// as gemm/tensor_map.cpp does.
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

}  // namespace

CUtensorMap expert_weight_map(const void* b, int64_t experts, int64_t n, int64_t k, int box_rows,
                              const std::string& who) {
  CUtensorMap map{};
  const cuuint64_t dims[3] = {static_cast<cuuint64_t>(k), static_cast<cuuint64_t>(n),
                              static_cast<cuuint64_t>(experts)};
  const cuuint64_t strides[2] = {static_cast<cuuint64_t>(k), static_cast<cuuint64_t>(n * k)};
  const cuuint32_t box[3] = {128, static_cast<cuuint32_t>(box_rows), 1};
  const cuuint32_t elem[3] = {1, 1, 1};
  const CUresult r = encode_fn()(&map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 3, const_cast<void*>(b), dims, strides, box,
                                 elem, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                 CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  FP8ROUTE_CHECK_CAT(r == CUDA_SUCCESS, ErrorCategory::cuda_error,
                     who << ": cuTensorMapEncodeTiled failed (" << int(r) << ") for the expert weights [" << experts
                         << ", " << n << ", " << k << "]");
  return map;
}

}  // namespace fp8route::moe
