#pragma once
// Device code of the per-token-group quantization (launchers: group_quant.cu).
//
// One kernel serves per-token-group quant, its fused silu_and_mul form, the masked EP-MoE form and
// the MoE scatter form: the forms differ only in which rows are read and where a group's codes and
// scale go, which is runtime data in GroupQuantParams. Compile-time traits are the input type, the
// group size (it fixes how many lanes share a group) and whether silu_and_mul is fused. The decode
// kernel runs the same arithmetic for small plain launches.

#include <cstdint>

#include "core/griddep.cuh"
#include "quant/common.cuh"

namespace fp8route::kernels {

// ---- the group-quant kernel --------------------------------------------------------------------

struct GroupQuantParams {
  const void* x;
  int64_t x_stride_e, x_stride_t;  // elements; the row of (e, t) starts at e*x_stride_e + t*x_stride_t
  int64_t experts;                 // 1 unless masked
  int64_t tokens;                  // source rows per expert (T, or T_pad when masked)
  int64_t hidden;                  // H of the output (input rows hold 2H when fused)
  int64_t groups;                  // H / group size
  int vecs;                        // H / kQuantVec, given (derived per item it cost a division)
  const int32_t* masked_m;         // [experts] or null
  const int32_t* src2dst;          // [tokens, topk] or null (scatter)
  const int32_t* owner;            // scatter: [dst_rows], the entry t * topk + j that writes each row;
                                   // null: the caller promised no row is named twice (unique_rows)
  int topk;
  int64_t dst_rows;                // scatter: rows of q and s
  uint8_t* q;                      // codes [.., H], row-major
  int64_t q_stride_e;              // elements between experts (masked)
  void* s;                         // f32 or packed int32 scales
  int64_t s_stride_e, s_stride_t, s_stride_c;  // in 4-byte words
  int64_t t_pad;                   // rows of the scale layout (tokens or dst_rows, padded)
  float qmax;
  bool int8, pow2, packed;
};

// Output encodings with code of their own: the two common ones (E4M3 codes with f32 scales, or with
// pow2 scales packed UE8M0) test nothing at run time per item; every other combination (INT8
// codes, pow2 scales stored as f32) runs `generic`, which reads the choices from the params.
enum class GroupEnc { generic, e4m3_f32, e4m3_ue8m0 };

// Lanes per group: each lane holds kVec elements (kQuantVec; kDecodeVec in the decode kernel); a
// group's lanes are adjacent, in one warp or (kLanes > 32, the decode kernel's groups of 256) in
// adjacent whole warps of one block.
template <int kGroup, int kVec = kQuantVec>
struct GroupTraits {
  static constexpr int kLanes = kGroup / kVec;
  static constexpr int kWarps = kLanes > 32 ? kLanes / 32 : 1;  // warps per group
  static_assert(kLanes >= 1 && kLanes <= 64 && (kLanes & (kLanes - 1)) == 0 && kGroup % kVec == 0,
                "group size must be kVec * a power of two, at most 256");
};

// ---- launch shape ---------------------------------------------------------------------------------
// Grid (row blocks, chunks). A block holds blockDim.y rows of blockDim.x threads; chunk y of a row
// is kItems * blockDim.x vectors, each thread taking kItems of them with all loads issued before
// the first is used. kItems = 4 for large inputs (bytes in flight), 1 for small ones (a short
// chain per thread over more blocks: latency). A row's expert and token come from the block index
// once; per-element work is kept to a few instructions because at HBM speed this kernel has about
// 128 instruction slots per warp per 256 elements.
constexpr int kGroupThreads = 256;

// Every lane of a warp must reach each shuffle, so every thread runs the same steps (rows of one
// launch have the same width) and inactive lanes take part with amax 0.
//
// The steps run item by item across all kItems at once (convert + amax, the shuffles, the scales,
// the codes), so the chains of different items overlap. The per-item work is kept to the
// arithmetic: the row's pointers are made once, offsets within a row are 32-bit, the encoding is
// a template parameter, and the NaN fix of the codes runs only in a warp that saw a NaN or inf.
// kPlain: the launch is one [T, H] (no experts, masked_m or src2dst), which a decode call's
// latency notices: the row's setup is a few instructions instead of the general form's.
template <class InT, int kGroup, bool kFused, int kItems, GroupEnc kEnc, bool kPlain>
__global__ void __launch_bounds__(kGroupThreads) group_quant_kernel(const GroupQuantParams p) {
  griddep_launch_dependents();  // PDL (core/griddep.cuh): everything below may read the previous kernel's output
  griddep_wait();
  constexpr int kLanes = GroupTraits<kGroup>::kLanes;
  const bool int8 = kEnc == GroupEnc::generic && p.int8;
  const bool pow2 = kEnc == GroupEnc::generic ? p.pow2 : kEnc == GroupEnc::e4m3_ue8m0;
  const bool packed = kEnc == GroupEnc::generic ? p.packed : kEnc == GroupEnc::e4m3_ue8m0;
  const float qmax = kEnc == GroupEnc::generic ? p.qmax : 448.0f;
  const int tpr = blockDim.x;
  const int tx = threadIdx.x;
  const int lane = tx % kLanes;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y;
  const int64_t src_rows = kPlain ? p.tokens : p.experts * p.tokens;
  const int64_t e = !kPlain && p.experts > 1 ? row / p.tokens : 0;  // no division in the common case
  const int64_t t = row - e * p.tokens;
  bool valid = row < src_rows;
  if (!kPlain && valid && p.masked_m) valid = t < min(static_cast<int64_t>(p.masked_m[e]), p.tokens);
  const int32_t* src2dst = kPlain ? nullptr : p.src2dst;

  const int vecs = p.vecs;
  const int first = static_cast<int>(blockIdx.y) * kItems * tpr + tx;
  const InT* src = static_cast<const InT*>(p.x) + e * p.x_stride_e + t * p.x_stride_t;

  Raw8<InT> raw[kItems], raw_up[kItems];
#pragma unroll
  for (int k = 0; k < kItems; ++k) {
    const int v = first + k * tpr;
    if (valid && v < vecs) {
      raw[k] = load_raw8(src + static_cast<uint32_t>(v) * kQuantVec);
      if constexpr (kFused) raw_up[k] = load_raw8(src + p.hidden + static_cast<uint32_t>(v) * kQuantVec);
    }
  }

  // Layout rows past the last token are zeroed by the last row of each expert (scatter: by source
  // row 0; with no tokens the launcher zeroes them), one column per group leader. Cold: one row in T.
  const bool pad_row = p.t_pad > 0 && (src2dst ? row == 0 : (row < src_rows && t == p.tokens - 1));
  if (pad_row && lane == 0) {
#pragma unroll 1
    for (int k = 0; k < kItems; ++k) {
      const int v = first + k * tpr;
      if (v >= vecs) break;
      uint32_t* s_e = static_cast<uint32_t*>(p.s) + e * p.s_stride_e;
      zero_row_padding(s_e, p.s_stride_t, p.s_stride_c, p.packed, src2dst ? p.dst_rows : p.tokens, p.t_pad,
                       v / kLanes);
    }
  }

  float x[kItems][kQuantVec];
  float amax[kItems];
  bool special = false;  // this lane holds a NaN or an infinity
#pragma unroll
  for (int k = 0; k < kItems; ++k)
    amax[k] = valid && first + k * tpr < vecs ? lane_values<kFused>(raw[k], raw_up[k], x[k], special) : 0.0f;
#pragma unroll
  for (int k = 0; k < kItems; ++k) amax[k] = group_max_nonneg<kLanes>(amax[k]);
  const bool fix_nan = __any_sync(0xffffffffu, special);  // warp-uniform
  if (!valid) return;

  uint8_t* q_row = p.q + e * p.q_stride_e + t * p.hidden;
  // Scale words of this row: s_row[c * s_stride_c] (packed: group c / 4).
  uint32_t* s_row = static_cast<uint32_t*>(p.s) + e * p.s_stride_e + t * p.s_stride_t;
#pragma unroll
  for (int k = 0; k < kItems; ++k) {
    const int v = first + k * tpr;
    if (v >= vecs) break;
    const ScaleAndMultiplier sm = make_scale(amax[k], qmax, pow2);
    const uint2 codes = encode(x[k], sm.multiplier, int8, fix_nan);
    const int c = v / kLanes;  // group (kLanes is a power of two)
    if (!src2dst) {
      *reinterpret_cast<uint2*>(q_row + static_cast<uint32_t>(v) * kQuantVec) = codes;
      if (lane == 0) store_scale(s_row, static_cast<uint32_t>(p.s_stride_c), p.groups, packed, c, sm);
      continue;
    }
    for (int j = 0; j < p.topk; ++j) {
      const int64_t entry = t * p.topk + j;
      const int64_t dst = src2dst[entry];
      // A row that several entries name is written by its owner alone (scatter_owner_kernel).
      if (dst < 0 || dst >= p.dst_rows || (p.owner && __ldg(p.owner + dst) != entry)) continue;
      *reinterpret_cast<uint2*>(p.q + dst * p.hidden + static_cast<uint32_t>(v) * kQuantVec) = codes;
      if (lane == 0)
        store_scale(static_cast<uint32_t*>(p.s) + dst * p.s_stride_t, static_cast<uint32_t>(p.s_stride_c), p.groups,
                    packed, c, sm);
    }
  }
}

// ---- the decode kernel ----------------------------------------------------------------------------
// Plain [T, H] launches with few lanes (decode), E4M3 codes with f32 or packed UE8M0 scales: the
// same arithmetic as group_quant_kernel in a shorter chain per lane. At T = 1 the GPU has far more
// lanes than the input has vectors and each lane's chain of dependent instructions is the kernel's
// time, so:
// - a lane takes kDecodeVec elements (a group of 128 is one warp), which halves the fused silu's
//   ~12 instructions per element in the chain;
// - the load's address needs no test: grid (chunks, T) with one row per blockIdx.y, and a lane past
//   the row's end reads the row's first vector and writes nothing;
// - the parameters are 56 bytes of 32-bit sizes (the general kernel's take 160), read without a
//   predicate.
// A group of 256 spans two warps, whose maxima meet in shared memory after one block barrier.
constexpr int kDecodeVec = 4;

struct DecodeQuantParams {  // 56 bytes
  const void* x;
  uint8_t* q;
  void* s;
  int32_t x_stride_t;  // elements
  int32_t hidden;      // H of the output (input rows hold 2H when fused)
  int32_t vecs;        // H / kDecodeVec
  int32_t tokens;
  int32_t t_pad;       // rows of the scale layout
  int32_t groups;
  int32_t s_stride_t, s_stride_c;  // 4-byte words
};

template <class InT, int kGroup, bool kFused, GroupEnc kEnc>
__global__ void __launch_bounds__(kGroupThreads) group_quant_decode_kernel(const DecodeQuantParams p) {
  griddep_launch_dependents();  // PDL (core/griddep.cuh): everything below may read the previous kernel's output
  griddep_wait();
  static_assert(kEnc != GroupEnc::generic, "the decode kernel has the two E4M3 encodings");
  constexpr bool kPacked = kEnc == GroupEnc::e4m3_ue8m0;
  using Traits = GroupTraits<kGroup, kDecodeVec>;
  constexpr int kLanes = Traits::kLanes;
  const int t = blockIdx.y;
  const int v = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  const bool valid = v < p.vecs;
  const InT* src = static_cast<const InT*>(p.x) + static_cast<int64_t>(t) * p.x_stride_t + (valid ? v : 0) * kDecodeVec;
  RawVec<InT, kDecodeVec> raw = load_raw<kDecodeVec>(src), raw_up;
  if constexpr (kFused) raw_up = load_raw<kDecodeVec>(src + p.hidden);

  const int lane = static_cast<int>(threadIdx.x) % kLanes;
  const int c = v / kLanes;
  uint32_t* s = static_cast<uint32_t*>(p.s);
  if (t == p.tokens - 1 && p.t_pad > p.tokens && lane == 0 && valid)  // layout rows past the last token
    zero_row_padding(s, p.s_stride_t, p.s_stride_c, kPacked, p.tokens, p.t_pad, c);

  float x[kDecodeVec];
  bool special = false;
  float amax = lane_values<kFused>(raw, raw_up, x, special);
  if (!valid) {
    amax = 0.0f;
    special = false;
  }
  amax = group_max_nonneg<kLanes>(amax);
  bool fix_nan = __any_sync(0xffffffffu, special);
  if constexpr (Traits::kWarps > 1) {  // a group of 256: two warps
    __shared__ uint32_t warp_amax[kGroupThreads / 32];
    __shared__ uint32_t warp_special[kGroupThreads / 32];
    const int warp = static_cast<int>(threadIdx.x) / 32;
    if (threadIdx.x % 32 == 0) {
      warp_amax[warp] = __float_as_uint(amax);
      warp_special[warp] = fix_nan;
    }
    __syncthreads();
    const int lead = warp / Traits::kWarps * Traits::kWarps;
    uint32_t m = 0, any = 0;
#pragma unroll
    for (int w = 0; w < Traits::kWarps; ++w) {
      m = max(m, warp_amax[lead + w]);
      any |= warp_special[lead + w];
    }
    amax = __uint_as_float(m);
    fix_nan = any != 0;
  }
  if (!valid) return;
  const ScaleAndMultiplier sm = make_scale(amax, 448.0f, kPacked);
  const uint32_t out = static_cast<uint32_t>(t) * static_cast<uint32_t>(p.hidden) + static_cast<uint32_t>(v) * kDecodeVec;
  *reinterpret_cast<uint32_t*>(p.q + out) = encode(x, sm.multiplier, false, fix_nan);
  if (lane == 0) store_scale(s + t * p.s_stride_t, static_cast<uint32_t>(p.s_stride_c), p.groups, kPacked, c, sm);
}

}  // namespace fp8route::kernels
