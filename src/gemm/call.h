#pragma once
// A scaled_mm call's arguments checked and put in the forms the kernels read: what the forced call
// (scaled_mm.cpp) and the routed one (route/routed_call.cpp, above routing) share.

#include <cuda_runtime_api.h>

#include "fp8route/gemm.h"
#include "gemm/backend.h"

namespace fp8route::gemm {

struct CheckedCall {
  ScaledMmArgs args;            // b as [N, K], block scales in their physical forms (gemm.h)
  bool gather_scale_a = false;  // a block scale_a given in another memory form: gathered at the run
  GemmProblem problem;
};

// Checks every argument (Error(invalid_argument) naming it; check_scaled_mm's rules) and
// normalizes them.
CheckedCall check_call(const ScaledMmArgs& args);

// Runs config `config` of b on the call (the caller has made sure it can: cannot_run_reason is "");
// nothing for an empty one.
void run_call(const GemmBackend& b, int config, const CheckedCall& call, cudaStream_t stream);

}  // namespace fp8route::gemm
