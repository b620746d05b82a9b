#pragma once
// Activation quantization (docs/cpp.md, quant.h; arithmetic in docs/numerics.md).
//
// Every function checks all of its arguments before anything is launched: on a bad argument it
// throws Error(invalid_argument) naming it and nothing is written. Tensors are TensorViews of device
// memory, all on one device; outputs have exactly the shapes that quant_layout() gives
// (allocate_group_quant_outputs makes them) and share no byte with an input or another output (no
// op works in place; an overlap is an error naming both tensors). A tensor with no elements may
// have a null pointer: an empty input (T = 0, or E = 0) launches nothing and returns, except where
// a function below says what it still writes. All work is enqueued on `stream`; nothing
// synchronizes, and everything can be captured in a CUDA graph.

#include <cuda_runtime_api.h>

#include <cstdint>

#include "fp8route/buffer.h"
#include "fp8route/quant_layout.h"
#include "fp8route/tensor.h"

namespace fp8route {

// Device buffers (on the current device) shaped by quant_layout(), with views onto them. Scale
// padding is zeroed by the kernels, not here.
struct GroupQuantOutputs {
  QuantLayout layout;
  DeviceBuffer code_buffer, scale_buffer;
  TensorView q, s;
};
GroupQuantOutputs allocate_group_quant_outputs(const GroupQuantSpec& spec, int64_t tokens,
                                               int64_t hidden, int64_t experts = 0);

// x [T, H] (f32/f16/bf16, last stride 1, rows 16-byte aligned, H a multiple of group_size) -> q [T, H]
// codes, s scales.
void per_token_group_quant(const TensorView& x, const GroupQuantSpec& spec, const TensorView& q,
                           const TensorView& s, cudaStream_t stream);

// x [T, 2H]: act = silu(x[:, :H]) * x[:, H:] in fp32, then per-token-group quant of act into
// q [T, H], s. Not bit-exact to the CPU reference (device exp); see docs/numerics.md.
void silu_and_mul_per_token_group_quant(const TensorView& x, const GroupQuantSpec& spec,
                                        const TensorView& q, const TensorView& s,
                                        cudaStream_t stream);

// EP-MoE masked form: x [E, T_pad, H], masked_m [E] int32 = valid rows per expert (values above
// T_pad are treated as T_pad). Rows t >= masked_m[e] are neither read nor written (codes and
// scales keep what they held); layout padding of the scales is still zeroed.
// q [E, T_pad, H], s = quant_layout(spec, T_pad, H, E).
void masked_per_token_group_quant(const TensorView& x, const TensorView& masked_m,
                                  const GroupQuantSpec& spec, const TensorView& q,
                                  const TensorView& s, cudaStream_t stream);
// The same with x [E, T_pad, 2H] and the fused silu_and_mul.
void masked_silu_and_mul_per_token_group_quant(const TensorView& x, const TensorView& masked_m,
                                               const GroupQuantSpec& spec, const TensorView& q,
                                               const TensorView& s, cudaStream_t stream);

// MoE scatter form: each token of x [T, H] is quantized once and its codes and scales written to
// every destination row src2dst[t, j] (int32 [T, topk]; -1 = skip; a value outside [-1, rows) is
// skipped too, never written out of bounds) of q [rows, H] and s = quant_layout(spec, rows, H).
// Rows that no token maps to are not written; layout padding of the scales is zeroed (with T = 0
// too). A row that several entries name gets the codes and scales of one token, never a mix: the
// entry with the largest t * topk + j wins. This costs a reset and a pass over src2dst per call
// (scratch of `rows` int32, per stream, or per graph under capture). unique_rows: the caller promises
// that no row is named by two entries (a dispatch's src2dst: moe_masked_dispatch,
// moe_contiguous_dispatch); the reset and the pass are skipped, and a row named twice gets unspecified
// codes and scales (never a write out of bounds).
void scatter_per_token_group_quant(const TensorView& x, const TensorView& src2dst,
                                   const GroupQuantSpec& spec, const TensorView& q,
                                   const TensorView& s, cudaStream_t stream, bool unique_rows = false);

// The per-token and per-tensor ops below take x [T, H] (f32/f16/bf16, last stride 1) with any
// H >= 1, any row stride >= H and a pointer aligned to its element, and q at any address; they are
// fastest with H % 8 == 0, rows of x 16-byte aligned and q 8-byte aligned (16-byte loads, 8-byte
// stores), and give the same codes and scales in every layout.

// Per-token: one scale per row. x [T, H] -> q [T, H] (e4m3 or i8, q's dtype says which),
// s f32 [T]; arithmetic as a group of size H.
void per_token_quant(const TensorView& x, const TensorView& q, const TensorView& s,
                     ScaleRounding rounding, cudaStream_t stream);

// MoE scatter form of per_token_quant: each token of x [T, H] quantized once (the codes and scale
// per_token_quant gives it) and written to every destination row src2dst[t, j] (int32 [T, topk]; -1
// or any value outside [0, rows) = skip) of q [rows, H] (e4m3 or i8) and s f32 [rows]. Rows no entry
// maps to are not written (they keep what they held). A row several entries name gets the codes and
// scale of one token, never a mix: the entry with the largest t * topk + j wins; up to T * topk = 4096
// entries each block finds that by itself (one launch), above it a reset and a pass over src2dst
// build a table first (scratch of `rows` int32, per stream, or per graph under capture).
// unique_rows: as scatter_per_token_group_quant's (no scan, no table).
void scatter_per_token_quant(const TensorView& x, const TensorView& src2dst, const TensorView& q,
                             const TensorView& s, ScaleRounding rounding, cudaStream_t stream,
                             bool unique_rows = false);

// x [T, 2H]: act = silu(x[:, :H]) * x[:, H:] in fp32 (as the fused group form), then per-token quant
// of act into q [T, H], s f32 [T]; any H >= 1. Tolerance, not bit-exactness, against the CPU
// reference (device exp; docs/numerics.md).
void silu_and_mul_per_token_quant(const TensorView& x, const TensorView& q, const TensorView& s,
                                  ScaleRounding rounding, cudaStream_t stream);
// EP-MoE masked form of silu_and_mul_per_token_quant (the per-token input of a masked grouped down
// projection): x [E, M_max, 2H] contiguous, masked_m int32 [E] (each count clamped to [0, M_max]),
// q [E, M_max, H] (e4m3 or i8), s f32 [E, M_max]. Rows t >= masked_m[e] are neither read nor
// written (q and s keep what they held); every other row gets exactly the codes and scale
// silu_and_mul_per_token_quant gives it. One block per row of the [E * M_max] (the launch does not
// depend on the counts; a skipped row's block leaves at once).
void masked_silu_and_mul_per_token_quant(const TensorView& x, const TensorView& masked_m, const TensorView& q,
                                         const TensorView& s, ScaleRounding rounding, cudaStream_t stream);

// Per-tensor, static scale: scale is a device f32 [1]; q = encode(x / scale), the division
// correctly rounded (NaN -> 0, +-inf -> +-qmax, as in docs/numerics.md).
void per_tensor_quant_static(const TensorView& x, const TensorView& scale, const TensorView& q,
                             cudaStream_t stream);

// Per-tensor, dynamic: scale (device f32 [1], written) = max(amax over finite x, floor) / qmax,
// then q = encode(x * qmax / amax): one amax pass over the tensor, then the codes. An empty x
// (T = 0) still writes scale = kAmaxFloor / qmax.
void per_tensor_quant_dynamic(const TensorView& x, const TensorView& q, const TensorView& scale,
                              cudaStream_t stream);

}  // namespace fp8route
