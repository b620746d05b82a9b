// The one library function the readers call beyond their own sources: gemm_backends(). The full
// library lists its registered backends (src/gemm/backend.h), which would pull every GEMM kernel
// and CUDA into the fuzz build; the readers only test names for membership, so a fixed list does.

#include <string>
#include <vector>

#include "fp8route/gemm.h"

namespace fp8route {

std::vector<std::string> gemm_backends() { return {"reference", "cublaslt", "skinny", "cutlass_sm90", "decode"}; }

}  // namespace fp8route
