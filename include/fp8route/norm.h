#pragma once
// RMSNorm, optionally after a residual add, alone or with the quantization of its output fused in:
// the ops an FP8 linear layer's input comes from. Arithmetic: docs/numerics.md, "RMSNorm". A fused
// op's codes and scales are bit-identical to rms_norm() followed by the matching quant.h op, so
// choosing between fused and unfused never changes a result.
//
// Argument rules are quant.h's: everything is checked before anything is launched, a bad argument
// throws Error(invalid_argument) naming it and nothing is written; T = 0 launches nothing; all work
// is enqueued on `stream` and can be captured in a CUDA graph. Two in-place forms are allowed and
// no other overlap: `residual_out` may be `residual` itself and `out` may be `x` itself (the same
// pointer and strides).

#include <cuda_runtime_api.h>

#include "fp8route/quant_layout.h"
#include "fp8route/tensor.h"

namespace fp8route {

// The input side shared by every op below.
struct RmsNormInput {
  TensorView x;             // [T, H], bf16 or f16, last stride 1, rows 16-byte aligned, H % 8 == 0,
                            // H <= kRmsNormMaxHidden
  TensorView weight;        // [H], x's dtype, contiguous
  float eps = 1e-6f;        // finite, >= 0
  TensorView residual;      // optional (no data and ndim 0: none): [T, H] of x's dtype; then
                            // h = x + residual (rounded to x's dtype) is what is normalized
  TensorView residual_out;  // [T, H] of x's dtype, required with residual: receives h
  // The caller's promise that `weight` is not written by any kernel that may still run when this op
  // starts (under programmatic dependent launch, earlier kernels of the stream that trigger their
  // dependents early can overlap it): in practice a model's norm weight, written at load time. The
  // kernel then loads it while the previous kernel finishes and waits only before reading x and
  // residual. False: every read waits.
  bool static_weight = false;
};

inline constexpr int64_t kRmsNormMaxHidden = 32768;

// out [T, H] (x's dtype) = rms_norm(h) * weight.
void rms_norm(const RmsNormInput& in, const TensorView& out, cudaStream_t stream);

// rms_norm, then per-token-group quant of its output (every GroupQuantSpec; q, s shaped by
// quant_layout(spec, T, H)).
void rms_norm_per_token_group_quant(const RmsNormInput& in, const GroupQuantSpec& spec, const TensorView& q,
                                    const TensorView& s, cudaStream_t stream);

// rms_norm, then per-token quant: q [T, H] (e4m3 or i8), s f32 [T].
void rms_norm_per_token_quant(const RmsNormInput& in, const TensorView& q, const TensorView& s,
                              ScaleRounding rounding, cudaStream_t stream);

// rms_norm, then per-tensor quant by a static scale (device f32 [1]): q [T, H] (e4m3 or i8).
// Dynamic per-tensor scales need the whole tensor's amax before any code: use rms_norm() and
// per_tensor_quant_dynamic().
void rms_norm_per_tensor_quant_static(const RmsNormInput& in, const TensorView& scale, const TensorView& q,
                                      cudaStream_t stream);

}  // namespace fp8route
