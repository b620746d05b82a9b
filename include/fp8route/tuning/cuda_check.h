#pragma once
// Status checks for CUDA runtime and cuBLAS(Lt) calls: a failure throws Error(cuda_error) with the
// call, file, line and the library's own name for the status.

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include "fp8route/error.h"

namespace fp8route::detail {
[[noreturn]] void throw_cuda(cudaError_t e, const char* call, const char* file, int line);
[[noreturn]] void throw_cublas(cublasStatus_t s, const char* call, const char* file, int line);
}  // namespace fp8route::detail

#define FP8ROUTE_CUDA_CHECK(call)                                                   \
  do {                                                                              \
    cudaError_t fp8route_e_ = (call);                                               \
    if (fp8route_e_ != cudaSuccess)                                                 \
      ::fp8route::detail::throw_cuda(fp8route_e_, #call, __FILE__, __LINE__);       \
  } while (0)

#define FP8ROUTE_CUBLAS_CHECK(call)                                                 \
  do {                                                                              \
    cublasStatus_t fp8route_s_ = (call);                                            \
    if (fp8route_s_ != CUBLAS_STATUS_SUCCESS)                                       \
      ::fp8route::detail::throw_cublas(fp8route_s_, #call, __FILE__, __LINE__);     \
  } while (0)

// After a kernel launch: a bad configuration shows up here, not at the next sync.
#define FP8ROUTE_CHECK_LAUNCH() FP8ROUTE_CUDA_CHECK(cudaGetLastError())
