// The library functions the readers call beyond their own sources: gemm_backends() and
// grouped_backends(). The full library lists its registered backends (src/gemm/backend.h,
// src/moe/backend.h), which would pull every kernel and CUDA into the fuzz build; the readers only
// test names for membership, so fixed lists do.

#include <string>
#include <vector>

#include "fp8route/gemm.h"
#include "fp8route/moe.h"

namespace fp8route {

std::vector<std::string> gemm_backends() { return {"reference", "cublaslt", "skinny", "cutlass_sm90", "decode"}; }
std::vector<std::string> grouped_backends() { return {"simt", "decode", "wgmma", "cutlass"}; }

}  // namespace fp8route
