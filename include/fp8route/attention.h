#pragma once
// Decode attention fused with what precedes it in a Llama-architecture layer: one kernel takes the
// qkv projection's output of one new token per sequence, applies the optional per-head RMSNorm of q
// and k, rotates q and k (rotary embedding, the rotate-half convention), appends k and v to the KV
// cache at the token's position, and attends over the cache (grouped-query, optional sliding
// window). Arithmetic: docs/numerics.md, "Decode attention".
//
// Argument rules are the other ops': everything is checked before anything is launched, a bad
// argument throws Error(invalid_argument) naming it and nothing is written; B = 0 launches nothing;
// all work is enqueued on `stream` and can be captured in a CUDA graph (the positions are read on the
// device, so one captured step serves every position).

#include <cuda_runtime_api.h>

#include "fp8route/tensor.h"

namespace fp8route {

struct DecodeAttentionArgs {
  TensorView qkv;        // [B, (Hq + 2 Hk) * D], bf16 or f16, last stride 1, rows 16-byte aligned: the Hq
                         // query heads, then the Hk key heads, then the Hk value heads, D values each
  TensorView k_cache;    // [B, Hk, S, D] of qkv's dtype, last stride 1, other strides multiples of 8
  TensorView v_cache;    // like k_cache (its own strides)
  TensorView cos, sin;   // [R, D] of qkv's dtype, contiguous, R >= S: the rotation of position p is row p
                         // (rotate-half: out = x * cos + rotate_half(x) * sin)
  TensorView positions;  // i32 [B]: where each sequence's token goes; it attends to positions
                         // max(0, p - window + 1) .. p. A position outside [0, S) writes nothing and
                         // makes that sequence's output NaN.
  TensorView q_norm;     // optional [D] of qkv's dtype: per-head RMSNorm of q before the rotation
  TensorView k_norm;     // optional, given exactly when q_norm is: the same for k
  float eps = 1e-6f;     // of the per-head RMSNorm; finite, >= 0
  int num_q_heads = 0;   // Hq, a positive multiple of num_kv_heads
  int num_kv_heads = 0;  // Hk
  float scale = 0.0f;    // softmax scale; 0: 1 / sqrt(D)
  int window = 0;        // sliding window in positions; 0: none
  // The caller's promise that `positions` and the cached rows before each position are not written
  // by any kernel that may still run when this op starts (under programmatic dependent launch,
  // earlier kernels of the stream that trigger early can overlap it): in a decoder whose cache only
  // this op and earlier steps write, and whose steps do not overlap. The kernel then loads them (its
  // first rows into registers, the next ones into L2) while the previous kernel finishes, and waits
  // for it only before reading qkv. False: every read waits.
  bool cache_ready = false;
};

// Head dims the kernel is built for.
inline constexpr int kDecodeAttentionHeadDims[] = {64, 128, 256};

// out [B, Hq * D] (qkv's dtype, last stride 1, rows 16-byte aligned) = softmax(q k^T * scale) v per
// query head over its kv head's cached positions; writes row p of k_cache and v_cache for each
// sequence.
void decode_attention(const DecodeAttentionArgs& args, const TensorView& out, cudaStream_t stream);

}  // namespace fp8route
