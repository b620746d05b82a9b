#pragma once
// Device code of the quantization family (docs/numerics.md). Launchers: src/quant/quant.cu.
//
// One kernel serves per-token-group quant, its fused silu_and_mul form, the masked EP-MoE form and
// the MoE scatter form: the forms differ only in which rows are read and where a group's codes and
// scale go, which is runtime data in GroupQuantParams. Compile-time traits are the input type, the
// group size (it fixes how many lanes share a group) and whether silu_and_mul is fused.
//
// Arithmetic: IEEE fp32 round-to-nearest throughout (__fdiv_rn/__fmul_rn; this file must not be
// built with fast math); E4M3 through cvt.rn.satfinite (cuda_fp8.h).

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cooperative_groups.h>
#include <cuda_fp8.h>

#include <cfloat>
#include <cstdint>
#include <type_traits>

#include "core/griddep.cuh"
#include "quant/scale_math.h"

namespace fp8route::kernels {

// ---- element conversion ------------------------------------------------------------------------

constexpr int kQuantVec = 8;  // elements per lane: 16 bytes of bf16/f16, two 16-byte loads of f32

// N elements as loaded (N * sizeof(T) bytes: one 16-byte vector of 8 bf16/f16, two of 8 f32; for
// the decode kernel's 4 elements one 8-byte word of bf16/f16, one 16-byte vector of f32). Kept raw
// between the load and the arithmetic so that several loads are in flight per thread at little
// register cost.
template <class T, int N>
struct RawVec {
  static constexpr int kBytes = N * static_cast<int>(sizeof(T));
  static_assert(kBytes == 8 || kBytes == 16 || kBytes == 32, "a lane loads 8, 16 or 32 bytes");
  using Word = std::conditional_t<(kBytes >= 16), uint4, uint2>;
  static constexpr int kWords = kBytes > 16 ? kBytes / 16 : 1;
  Word r[kWords];
};
template <class T>
using Raw8 = RawVec<T, kQuantVec>;

template <int N, class T>
__device__ __forceinline__ RawVec<T, N> load_raw(const T* p) {
  RawVec<T, N> v;
  using Word = typename RawVec<T, N>::Word;
#pragma unroll
  for (int i = 0; i < RawVec<T, N>::kWords; ++i) v.r[i] = __ldg(reinterpret_cast<const Word*>(p) + i);
  return v;
}

template <class T>
__device__ __forceinline__ Raw8<T> load_raw8(const T* p) {
  return load_raw<kQuantVec>(p);
}

__device__ __forceinline__ float2 pair_to_float2(__nv_bfloat162 h) { return __bfloat1622float2(h); }
__device__ __forceinline__ float2 pair_to_float2(__half2 h) { return __half22float2(h); }

template <class T>
struct HalfPair;  // the two-element vector type of a 16-bit float
template <>
struct HalfPair<__nv_bfloat16> { using type = __nv_bfloat162; };
template <>
struct HalfPair<__half> { using type = __half2; };

template <class T, int N>
__device__ __forceinline__ void to_float(const RawVec<T, N>& v, float (&f)[N]) {
  if constexpr (sizeof(T) == 4) {
    const float* w = reinterpret_cast<const float*>(&v.r[0]);
#pragma unroll
    for (int i = 0; i < N; ++i) f[i] = w[i];
  } else {
    const auto* h = reinterpret_cast<const typename HalfPair<T>::type*>(&v.r[0]);
#pragma unroll
    for (int i = 0; i < N / 2; ++i) {
      const float2 x = pair_to_float2(h[i]);
      f[2 * i] = x.x;
      f[2 * i + 1] = x.y;
    }
  }
}

template <class T>
__device__ __forceinline__ void to_float8(const Raw8<T>& v, float (&f)[kQuantVec]) {
  to_float(v, f);
}

template <class T>
__device__ __forceinline__ void load_vec8(const T* p, float (&v)[kQuantVec]) {
  to_float8(load_raw8(p), v);
}

// |v| if finite, else 0: the amax of docs/numerics.md is over the finite elements only.
__device__ __forceinline__ float finite_abs(float v) {
  const float a = fabsf(v);
  return a <= FLT_MAX ? a : 0.0f;
}

// The fused path has a tolerance (docs/numerics.md: scales within 1e-6 relative), not bit-exactness:
// expf (not __expf: that one is several ulp off for large |gate| and flushes denormals) and the
// hardware reciprocal of 1 + exp(-gate) times gate (2 ulp; what __fdividef computes, without its
// rescaling of denominators below FLT_MIN, which 1 + exp(-gate) >= 1 never is; a denominator above
// 2^126 has reciprocal 0, silu's limit there, -0 for gate -> -inf) keep the result within a few
// ulp of fp32, ~3e-7 relative.
__device__ __forceinline__ float silu_and_mul(float gate, float up) {
  float r;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(__fadd_rn(1.0f, expf(-gate))));
  return __fmul_rn(__fmul_rn(r, gate), up);
}

// ---- scales ------------------------------------------------------------------------------------

constexpr float kAmaxFloorDevice = 1e-10f;  // == fp8route::kAmaxFloor (quant_layout.h)

struct ScaleAndMultiplier {
  float scale;
  float multiplier;
  uint32_t ue8m0;  // biased exponent (pow2 only)
};

// The divisions are div_by_qmax and qmax_div (scale_math.h): correctly rounded, like __fdiv_rn,
// over the whole range amax can take here, in fewer instructions and without a slow-path branch.
__device__ __forceinline__ ScaleAndMultiplier make_scale(float amax, float qmax, bool pow2) {
  amax = fmaxf(amax, kAmaxFloorDevice);
  ScaleAndMultiplier r;
  if (!pow2) {
    r.scale = div_by_qmax(amax, qmax);
    r.multiplier = qmax_div(qmax, amax);
    r.ue8m0 = 0;
    return r;
  }
  // Bit-exact ceil to a power of two: the exponent, plus one if any mantissa bit is set.
  const uint32_t bits = __float_as_uint(div_by_qmax(amax, qmax));
  int e = static_cast<int>((bits >> 23) & 0xFF) + ((bits & 0x7FFFFF) != 0 ? 1 : 0);
  e = min(max(e, 1), 254);
  r.ue8m0 = static_cast<uint32_t>(e);
  r.scale = __uint_as_float(static_cast<uint32_t>(e) << 23);
  // 2^(127 - e); for e = 254 that is 2^-127, a subnormal (kept: no flush-to-zero on this path).
  r.multiplier = e < 254 ? __uint_as_float(static_cast<uint32_t>(254 - e) << 23)
                         : __uint_as_float(0x00400000u);
  return r;
}

// ---- codes -------------------------------------------------------------------------------------

// N codes packed little-endian into N bytes (a uint2 for 8, a uint32_t for 4).
template <int N>
using CodeWord = std::conditional_t<N == 8, uint2, uint32_t>;

// NaN elements -> 0; E4M3 saturates (+-inf included) to +-448, INT8 rounds to nearest even and
// saturates to +-127.
template <int N>
__device__ __forceinline__ CodeWord<N> encode(const float (&x)[N], float m, bool int8, bool may_have_nan = true) {
  static_assert(N == 4 || N == 8, "4 or 8 codes per lane");
  constexpr int kWords = N / 4;
  uint32_t w[kWords] = {};
  if (!int8) {
#pragma unroll
    for (int i = 0; i < N; i += 2) {
      const __nv_fp8x2_storage_t p = __nv_cvt_float2_to_fp8x2(
          make_float2(__fmul_rn(x[i], m), __fmul_rn(x[i + 1], m)), __NV_SATFINITE, __NV_E4M3);
      w[i / 4] |= static_cast<uint32_t>(p) << (8 * (i % 4));
    }
    // A NaN input converts to the NaN code 0x7F / 0xFF, the only codes whose low seven bits are
    // all set; docs/numerics.md has 0 there. Fixed on the packed bytes: 3 instructions per 4 codes
    // instead of a test per element.
    if (may_have_nan) {
#pragma unroll
      for (int j = 0; j < kWords; ++j) w[j] &= ~__vcmpeq4(w[j] | 0x80808080u, 0xFFFFFFFFu);
    }
  } else {
#pragma unroll
    for (int i = 0; i < N; ++i) {
      const float v = isnan(x[i]) ? 0.0f : __fmul_rn(x[i], m);
      const int q = __float2int_rn(fminf(fmaxf(v, -127.0f), 127.0f));
      w[i / 4] |= (static_cast<uint32_t>(q) & 0xFFu) << (8 * (i % 4));
    }
  }
  if constexpr (N == 8) return make_uint2(w[0], w[1]);
  else return w[0];
}

template <int N>
__device__ __forceinline__ float exact_finite_amax(const float (&x)[N]) {
  float a = 0.0f;
#pragma unroll
  for (int i = 0; i < N; ++i) a = fmaxf(a, finite_abs(x[i]));
  return a;
}

// max that returns NaN when either input is NaN (PTX max.NaN, SM 8.0+): one instruction, like fmaxf.
__device__ __forceinline__ float fmax_nan(float a, float b) {
  float d;
  asm("max.NaN.f32 %0, %1, %2;" : "=f"(d) : "f"(a), "f"(b));
  return d;
}

// The group kernel's amax: |x| with NaN propagated, so one test (`special`: not <= FLT_MAX) finds
// the rare lane holding a NaN or an infinity. Only such a lane pays for the exact finite amax and
// for fixing NaN codes.
// The maximum is taken as a tree (log2 N dependent steps, not N): a decode lane's time is its chain.
template <int N>
__device__ __forceinline__ float amax_flag(const float (&x)[N], bool& special) {
  float m[N];
#pragma unroll
  for (int i = 0; i < N; ++i) m[i] = fabsf(x[i]);
#pragma unroll
  for (int w = 1; w < N; w *= 2)
#pragma unroll
    for (int i = 0; i + w < N; i += 2 * w) m[i] = fmax_nan(m[i], m[i + w]);
  float a = m[0];
  if (!(a <= FLT_MAX)) {
    special = true;
    a = exact_finite_amax(x);
  }
  return a;
}

// Finite-amax of N values: fmaxf with |x| ignores NaN for free; an infinity (rare) sends the
// lane through the exact test, so the common case costs one instruction per element.
template <int N>
__device__ __forceinline__ float finite_amax(const float (&x)[N]) {
  float a = 0.0f;
#pragma unroll
  for (int i = 0; i < N; ++i) a = fmaxf(a, fabsf(x[i]));
  if (a > FLT_MAX) a = exact_finite_amax(x);
  return a;
}

// ---- maxima across lanes ------------------------------------------------------------------------
// Amax values are non-negative and never NaN (an infinity at most), so their bit patterns order
// like unsigned integers and REDUX (redux.sync.max.u32, SM 8.0+) reduces a whole warp in one
// instruction where the shuffle ladder takes five shuffle + max steps. REDUX takes a single mask
// per warp (its result is warp-uniform), so a warp holding 32 / kLanes groups runs one full-warp
// REDUX per group, each lane offering its value to its own group's and 0 to the others'. That is
// shorter than the log2(kLanes) shuffle steps for kLanes >= 16 (groups of 128 and 256); narrower
// groups shuffle. Every lane of the warp must call these (inactive ones with 0), and the warp must
// be whole.

__device__ __forceinline__ float warp_max_nonneg(float v) {
  return __uint_as_float(__reduce_max_sync(0xffffffffu, __float_as_uint(v)));
}

// A group wider than a warp (kLanes > 32) gets its warp's max here; the kernel combines the warps.
template <int kLanes>
__device__ __forceinline__ float group_max_nonneg(float v) {
  if constexpr (kLanes >= 32) {
    return warp_max_nonneg(v);
  } else if constexpr (kLanes >= 16) {
    const unsigned bits = __float_as_uint(v);
    const unsigned mine = (threadIdx.x + threadIdx.y * blockDim.x) % 32 / kLanes;
    unsigned r = 0;
#pragma unroll
    for (unsigned g = 0; g < 32 / kLanes; ++g) {
      const unsigned m = __reduce_max_sync(0xffffffffu, mine == g ? bits : 0u);
      if (mine == g) r = m;
    }
    return __uint_as_float(r);
  } else {
#pragma unroll
    for (int off = kLanes / 2; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
    return v;
  }
}

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
  const int32_t* owner;            // scatter: [dst_rows], the entry t * topk + j that writes each row
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

// Writes zeros into the scale padding that column `c` (a group; for packed storage the group that
// owns a word, c % 4 == 0) is responsible for: layout rows [rows, t_pad) of the scales at s (one
// expert's), words t * stride_t + column * stride_c.
__device__ __forceinline__ void zero_row_padding(uint32_t* s, int64_t stride_t, int64_t stride_c, bool packed,
                                                 int64_t rows, int64_t t_pad, int64_t c) {
  if (packed && (c & 3)) return;
  const int64_t col = packed ? (c >> 2) : c;
  for (int64_t t = rows; t < t_pad; ++t) s[t * stride_t + col * stride_c] = 0;
}

// Scale of group c (of `groups`) of a row whose scale words start at s_row (f32: word c * stride;
// packed: byte c % 4, little-endian, of word c / 4, a byte store that leaves the other groups'
// bytes alone). Word offsets within one expert's scales fit 32 bits (checked by the launcher).
__device__ __forceinline__ void store_scale(uint32_t* s_row, uint32_t stride, int64_t groups, bool packed,
                                            int c, const ScaleAndMultiplier& sm) {
  if (!packed) {
    reinterpret_cast<float*>(s_row)[static_cast<uint32_t>(c) * stride] = sm.scale;
    return;
  }
  uint8_t* word = reinterpret_cast<uint8_t*>(s_row + static_cast<uint32_t>(c >> 2) * stride);
  word[c & 3] = static_cast<uint8_t>(sm.ue8m0);
  if (c == groups - 1)  // bytes past the last group are padding
    for (int b = (c & 3) + 1; b < 4; ++b) word[b] = 0;
}

// One lane's values: its raw vector converted (fused: silu(gate) * up, the up half from raw_up),
// and their amax (`special` set if the lane holds a NaN or an infinity).
template <bool kFused, class InT, int N>
__device__ __forceinline__ float lane_values(const RawVec<InT, N>& raw, const RawVec<InT, N>& raw_up,
                                             float (&x)[N], bool& special) {
  to_float(raw, x);
  if constexpr (kFused) {
    float up[N];
    to_float(raw_up, up);
#pragma unroll
    for (int i = 0; i < N; ++i) x[i] = silu_and_mul(x[i], up[i]);
  }
  return amax_flag(x, special);
}

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
      if (dst < 0 || dst >= p.dst_rows || __ldg(p.owner + dst) != entry) continue;
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
// On the H200 at T = 1, H = 4096 the last two took the fused kernel from 1.53 to 1.48 us and the
// plain one from 1.45 to 1.36 (4 elements per lane in the general kernel, then this kernel); which
// of the two matters more was not measured. A group of 256 spans two warps, whose maxima meet in
// shared memory after one block barrier.
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

// ---- per-token and per-tensor ------------------------------------------------------------------

constexpr int kRowThreads = 256;
constexpr int kRowItems = 4;  // 16-byte loads in flight per thread in the grid-stride kernels

// Rows of any width. The row kernels below take a template flag kAligned: true when H % 8 == 0,
// every row of x starts 16-byte aligned and every row of q 8-byte aligned (the launcher's
// vector_rows), so that each 8-element vector is one or two 16-byte loads and one 8-byte store;
// false for everything else (H of any size >= 1, row strides of any number of elements, pointers
// aligned to their element only). With kAligned false a row still splits into 8-element vectors,
// ceil(H / 8) of them, the last holding H - 8 * v < 8 elements when H % 8 != 0; a vector takes the
// wide load (store) where it is whole and its address allows, else one element at a time, reading
// the elements past the row's end as +0 (which leaves the amax as it is) and writing only the codes
// of the row. Values, amax, scale and codes are the same arithmetic either way.

// Vectors of a row of `hidden` elements.
template <bool kAligned>
__device__ __forceinline__ int64_t row_vecs(int64_t hidden) {
  return kAligned ? hidden / kQuantVec : (hidden + kQuantVec - 1) / kQuantVec;
}

// Elements of vector v of a row of `hidden` elements (8 but for the last of a row when H % 8 != 0;
// always 8 with kAligned).
template <bool kAligned>
__device__ __forceinline__ int vec_width(int64_t hidden, int64_t v) {
  if constexpr (kAligned) return kQuantVec;
  else return static_cast<int>(min(static_cast<int64_t>(kQuantVec), hidden - v * kQuantVec));
}

// Elements [0, n) of p (n <= 8) one at a time into the words a 16-byte load would fill; +0 past n.
template <class T>
__device__ __forceinline__ Raw8<T> load_raw8_elems(const T* p, int n) {
  constexpr int kBytes = static_cast<int>(sizeof(T));
  using Bits = std::conditional_t<kBytes == 2, unsigned short, unsigned int>;
  uint32_t w[kQuantVec * kBytes / 4] = {};
#pragma unroll
  for (int j = 0; j < kQuantVec; ++j)
    if (j < n)
      w[j * kBytes / 4] |= static_cast<uint32_t>(__ldg(reinterpret_cast<const Bits*>(p) + j)) << (8 * (j * kBytes % 4));
  Raw8<T> v;
#pragma unroll
  for (int i = 0; i < Raw8<T>::kWords; ++i) v.r[i] = make_uint4(w[4 * i], w[4 * i + 1], w[4 * i + 2], w[4 * i + 3]);
  return v;
}

// The n (<= 8) elements of a vector at p: the wide load (kAligned, or a whole vector at a 16-byte
// address), else element loads.
template <bool kAligned, class T>
__device__ __forceinline__ Raw8<T> load_row_vec(const T* p, int n) {
  if constexpr (kAligned) {
    return load_raw8(p);
  } else {
    if (n == kQuantVec && (reinterpret_cast<uintptr_t>(p) & 15) == 0) return load_raw8(p);
    return load_raw8_elems(p, n);
  }
}

// The first n (<= 8) of a vector's codes at q: one 8-byte store (kAligned, or a whole vector at an
// 8-byte address), else byte stores.
template <bool kAligned>
__device__ __forceinline__ void store_row_codes(uint8_t* q, uint2 codes, int n) {
  if constexpr (kAligned) {
    *reinterpret_cast<uint2*>(q) = codes;
  } else {
    if (n == kQuantVec && (reinterpret_cast<uintptr_t>(q) & 7) == 0) {
      *reinterpret_cast<uint2*>(q) = codes;
      return;
    }
#pragma unroll
    for (int j = 0; j < kQuantVec; ++j)
      if (j < n) q[j] = static_cast<uint8_t>((j < 4 ? codes.x : codes.y) >> (8 * (j % 4)));
  }
}

// The block's max of non-negative, non-NaN values (a 1-D block of whole warps). Once per kernel:
// smem is written without a barrier before it, so a second call could overwrite slots that a slow
// warp still reads from the first.
__device__ __forceinline__ float block_max(float v, float* smem) {
  v = warp_max_nonneg(v);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) smem[warp] = v;
  __syncthreads();
  return warp_max_nonneg(lane < static_cast<int>(blockDim.x / 32) ? smem[lane] : 0.0f);
}

struct RowQuantParams {
  const void* x;
  int64_t x_stride_t;  // elements
  int64_t rows, hidden;
  uint8_t* q;
  float* s;            // per-token: [rows]; per-tensor: [1]
  const float* static_scale;  // per-tensor static
  float qmax;
  bool int8, pow2;
};

// One block per row: amax over the row, then its codes. A row of up to kRegVecs vectors per thread
// stays in registers (all loads in flight at once, the values computed once); kRegVecs is the
// smallest of 1, 2, 4, 8 that holds the row (token_reg_vecs), since registers held for vectors a
// row does not have cost occupancy, and with one block per row the bytes in flight per SM are
// blocks per SM x threads x loads per thread: a 4096-wide row held in 8-vector registers ran at 60%
// of the copy bandwidth at T = 16384, in 2-vector ones at the group kernel's speed. kRegVecs = 0:
// wider rows (more than 16384 elements) are read again from L1/L2 for the codes.
constexpr int kTokenMaxRegVecs = 8;

// The register vectors per thread for a row of `vecs` 8-element vectors (0: the two-read form).
inline constexpr int token_reg_vecs(int64_t vecs) {
  for (int r = 1; r <= kTokenMaxRegVecs; r *= 2)
    if (vecs <= int64_t{r} * kRowThreads) return r;
  return 0;
}

// kFused: x rows are [gate (hidden) | up (hidden)] and the quantized values are silu(gate) * up in
// fp32 (the fused silu_and_mul of the group kernel).
// kAligned: see "Rows of any width" above.
template <class InT, bool kFused, bool kAligned, int kRegVecs>
__global__ void __launch_bounds__(kRowThreads) per_token_quant_kernel(const RowQuantParams p) {
  griddep_launch_dependents();  // PDL (core/griddep.cuh): everything below may read the previous kernel's output
  griddep_wait();
  __shared__ float smem[32];
  const int64_t t = blockIdx.x;
  const InT* row = static_cast<const InT*>(p.x) + t * p.x_stride_t;
  const InT* up = kFused ? row + p.hidden : row;
  uint8_t* q = p.q + t * p.hidden;
  const int vecs = static_cast<int>(row_vecs<kAligned>(p.hidden));
  bool special = false;  // lane_values' NaN/inf flag (its return value is already the finite amax)
  if constexpr (kRegVecs > 0) {
    Raw8<InT> raw[kRegVecs], raw_up[kFused ? kRegVecs : 1];
#pragma unroll
    for (int k = 0; k < kRegVecs; ++k) {
      const int v = k * kRowThreads + threadIdx.x;
      if (v < vecs) {
        const int n = vec_width<kAligned>(p.hidden, v);
        raw[k] = load_row_vec<kAligned>(row + v * kQuantVec, n);
        if constexpr (kFused) raw_up[k] = load_row_vec<kAligned>(up + v * kQuantVec, n);
      }
    }
    // The values once (silu_and_mul is most of a decode row's instructions, on one SM), kept for
    // the codes.
    float amax = 0.0f;
    float x[kRegVecs][kQuantVec];
#pragma unroll
    for (int k = 0; k < kRegVecs; ++k) {
      if (k * kRowThreads + static_cast<int>(threadIdx.x) < vecs)
        amax = fmaxf(amax, lane_values<kFused>(raw[k], raw_up[kFused ? k : 0], x[k], special));
    }
    amax = block_max(amax, smem);
    const ScaleAndMultiplier sm = make_scale(amax, p.qmax, p.pow2);
#pragma unroll
    for (int k = 0; k < kRegVecs; ++k) {
      const int v = k * kRowThreads + threadIdx.x;
      if (v < vecs)
        store_row_codes<kAligned>(q + v * kQuantVec, encode(x[k], sm.multiplier, p.int8),
                                  vec_width<kAligned>(p.hidden, v));
    }
    if (threadIdx.x == 0) p.s[t] = sm.scale;
  } else {
    // Vector v's values (read again for the codes from L1/L2); returns their finite amax.
    auto values = [&](int v, float (&x)[kQuantVec]) {
      const int n = vec_width<kAligned>(p.hidden, v);
      return lane_values<kFused>(load_row_vec<kAligned>(row + v * kQuantVec, n),
                                 kFused ? load_row_vec<kAligned>(up + v * kQuantVec, n) : Raw8<InT>{}, x, special);
    };
    float amax = 0.0f;
  #pragma unroll 4
    for (int v = threadIdx.x; v < vecs; v += blockDim.x) {
      float x[kQuantVec];
      amax = fmaxf(amax, values(v, x));
    }
    amax = block_max(amax, smem);
    const ScaleAndMultiplier sm = make_scale(amax, p.qmax, p.pow2);
    for (int v = threadIdx.x; v < vecs; v += blockDim.x) {
      float x[kQuantVec];
      values(v, x);
      store_row_codes<kAligned>(q + v * kQuantVec, encode(x, sm.multiplier, p.int8),
                                vec_width<kAligned>(p.hidden, v));
    }
    if (threadIdx.x == 0) p.s[t] = sm.scale;
  }
}

// Grid-stride walk over the vectors of x[rows, hidden]: kRowItems loads in flight per thread,
// then fn(t, v, x) for each loaded vector (row t, vector v of the row; kAligned false: x holds +0
// past the row's end).
template <class InT, bool kAligned, class Fn>
__device__ __forceinline__ void for_each_vector(const RowQuantParams& p, Fn&& fn) {
  const int64_t vecs_per_row = row_vecs<kAligned>(p.hidden);
  const int64_t total = p.rows * vecs_per_row;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i0 = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i0 < total; i0 += kRowItems * stride) {
    Raw8<InT> raw[kRowItems];
#pragma unroll
    for (int k = 0; k < kRowItems; ++k) {
      const int64_t i = i0 + k * stride;
      if (i < total) {
        const int64_t t = i / vecs_per_row, v = i - t * vecs_per_row;
        raw[k] = load_row_vec<kAligned>(static_cast<const InT*>(p.x) + t * p.x_stride_t + v * kQuantVec,
                                        vec_width<kAligned>(p.hidden, v));
      }
    }
#pragma unroll
    for (int k = 0; k < kRowItems; ++k) {
      const int64_t i = i0 + k * stride;
      if (i >= total) break;
      const int64_t t = i / vecs_per_row;
      float x[kQuantVec];
      to_float8(raw[k], x);
      fn(t, i - t * vecs_per_row, x);
    }
  }
}

// Per-tensor amax, then the scale, in one launch. Each block takes its max over a grid-stride walk
// and folds it into ws->amax_bits (atomicMax on the bits of a non-negative float, ordered like the
// integers); the last block to finish (a ticket counter) turns the amax into the scale (*p.s) and the
// multiplier the code kernel reads (ws->multiplier), and leaves amax_bits and the counter at zero
// for the next call, so the workspace needs no clearing launch. ws starts zeroed (its allocation).
struct TensorAmaxWorkspace {
  unsigned int amax_bits;
  unsigned int blocks_done;
  float multiplier;
};

template <class InT, bool kAligned = true>
__global__ void __launch_bounds__(kRowThreads) tensor_amax_kernel(const RowQuantParams p,
                                                                  TensorAmaxWorkspace* ws) {
  griddep_launch_dependents();
  griddep_wait();
  __shared__ float smem[32];
  float amax = 0.0f;
  for_each_vector<InT, kAligned>(p, [&](int64_t, int64_t, const float (&x)[kQuantVec]) {
    amax = fmaxf(amax, finite_amax(x));
  });
  amax = block_max(amax, smem);
  if (threadIdx.x != 0) return;
  atomicMax(&ws->amax_bits, __float_as_uint(amax));
  __threadfence();
  if (atomicAdd(&ws->blocks_done, 1u) != gridDim.x - 1) return;
  // Last block: every other block's atomicMax is visible (each fenced before taking its ticket).
  const float total = __uint_as_float(atomicExch(&ws->amax_bits, 0u));
  ws->blocks_done = 0;
  const ScaleAndMultiplier sm = make_scale(total, p.qmax, false);
  *p.s = sm.scale;
  ws->multiplier = sm.multiplier;
}

// Per-tensor codes. Dynamic: the multiplier comes from tensor_amax_kernel (*multiplier). Static:
// v = x / scale, correctly rounded, then the encoder with multiplier 1 (exact).
template <class InT, bool kStatic, bool kAligned = true>
__global__ void __launch_bounds__(kRowThreads) tensor_quant_kernel(const RowQuantParams p,
                                                                   const float* multiplier) {
  griddep_launch_dependents();
  griddep_wait();
  float m = 1.0f, s = 1.0f;
  if constexpr (kStatic) s = *p.static_scale;
  else m = *multiplier;
  for_each_vector<InT, kAligned>(p, [&](int64_t t, int64_t v, const float (&xin)[kQuantVec]) {
    float x[kQuantVec];
#pragma unroll
    for (int j = 0; j < kQuantVec; ++j) x[j] = kStatic ? __fdiv_rn(xin[j], s) : xin[j];
    const uint2 codes = encode(x, m, p.int8);
    store_row_codes<kAligned>(p.q + t * p.hidden + v * kQuantVec, codes, vec_width<kAligned>(p.hidden, v));
  });
}

// Small tensors (decode activations) in one launch and one read: a thread block cluster of up to 8
// blocks of kClusterThreads, the tensor's vectors spread evenly over them (`per_thread` each, at
// most kClusterVecs, held in registers). Each block takes its max; the blocks exchange them through
// distributed shared memory (cluster barrier, read the peers' slots, barrier again so that no
// block leaves while a peer still reads its slot), then every block encodes its registers. Block 0
// writes the scale. Vectors are numbered i = row * vectors per row + column / 8. With kAligned the
// codes are contiguous, and x is read without a division per vector when its rows are contiguous
// too; rows of any width ("Rows of any width" above) have each vector's row and column computed,
// for x and for q.
constexpr int kClusterThreads = 256;
constexpr int kClusterMaxBlocks = 8;  // the portable cluster size
template <class InT>
constexpr int kClusterVecs = sizeof(InT) == 4 ? 4 : 8;  // 32 registers of loads per thread

template <class InT, bool kAligned = true>
__global__ void __launch_bounds__(kClusterThreads) tensor_quant_cluster_kernel(const RowQuantParams p,
                                                                               int per_thread) {
  griddep_launch_dependents();
  griddep_wait();
  constexpr int kVecs = kClusterVecs<InT>;
  __shared__ float smem[32];
  __shared__ float block_amax;
  cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
  const int vecs_per_row = static_cast<int>(row_vecs<kAligned>(p.hidden));
  const int total = static_cast<int>(p.rows) * vecs_per_row;
  [[maybe_unused]] const bool contiguous = p.x_stride_t == p.hidden;
  const int stride = static_cast<int>(gridDim.x) * kClusterThreads;
  const int base = static_cast<int>(blockIdx.x) * kClusterThreads + static_cast<int>(threadIdx.x);
  const InT* x = static_cast<const InT*>(p.x);
  // Any width: vector i's elements in x, its codes in q, and how many it holds.
  struct Place {
    int64_t x_off, q_off;
    int n;
  };
  [[maybe_unused]] auto place = [&](int i) {
    const int t = i / vecs_per_row, v = i - t * vecs_per_row;
    const int64_t col = static_cast<int64_t>(v) * kQuantVec;
    return Place{t * p.x_stride_t + col, t * p.hidden + col, vec_width<false>(p.hidden, v)};
  };
  Raw8<InT> raw[kVecs];
#pragma unroll
  for (int k = 0; k < kVecs; ++k) {
    const int i = base + k * stride;
    if (k < per_thread && i < total) {
      if constexpr (kAligned) {
        int64_t off = static_cast<int64_t>(i) * kQuantVec;
        if (!contiguous) {
          const int t = i / vecs_per_row;
          off = t * p.x_stride_t + (i - t * vecs_per_row) * kQuantVec;
        }
        raw[k] = load_raw8(x + off);
      } else {
        const Place at = place(i);
        raw[k] = load_row_vec<false>(x + at.x_off, at.n);
      }
    }
  }
  float amax = 0.0f;
#pragma unroll
  for (int k = 0; k < kVecs; ++k) {
    if (k < per_thread && base + k * stride < total) {
      float v[kQuantVec];
      to_float8(raw[k], v);
      amax = fmaxf(amax, finite_amax(v));
    }
  }
  amax = block_max(amax, smem);
  if (threadIdx.x == 0) block_amax = amax;
  cluster.sync();
  if (threadIdx.x < 32) {
    const float peer = warp_max_nonneg(
        threadIdx.x < cluster.num_blocks() ? *cluster.map_shared_rank(&block_amax, threadIdx.x) : 0.0f);
    if (threadIdx.x == 0) smem[0] = peer;
  }
  cluster.sync();  // the peers' slots are read; smem[0] is visible to the block
  const ScaleAndMultiplier sm = make_scale(smem[0], p.qmax, false);
#pragma unroll
  for (int k = 0; k < kVecs; ++k) {
    const int i = base + k * stride;
    if (k < per_thread && i < total) {
      float v[kQuantVec];
      to_float8(raw[k], v);
      if constexpr (kAligned) {
        *reinterpret_cast<uint2*>(p.q + static_cast<int64_t>(i) * kQuantVec) = encode(v, sm.multiplier, p.int8);
      } else {
        const uint2 codes = encode(v, sm.multiplier, p.int8);
        const Place at = place(i);
        store_row_codes<false>(p.q + at.q_off, codes, at.n);
      }
    }
  }
  if (blockIdx.x == 0 && threadIdx.x == 0) *p.s = sm.scale;
}

}  // namespace fp8route::kernels
