#pragma once
// Device helpers shared by the quantization kernels (docs/numerics.md): element conversion, the
// scale and its multiplier, the codes, maxima across lanes and blocks, and the scale stores of the
// group layouts. Kernels: group_kernel.cuh (per-token-group), token_kernel.cuh (per-token),
// tensor_kernel.cuh (per-tensor), norm_kernel.cuh (RMSNorm and its fused quantization).
//
// Arithmetic: IEEE fp32 round-to-nearest throughout (__fdiv_rn/__fmul_rn; these files must not be
// built with fast math); E4M3 through cvt.rn.satfinite (cuda_fp8.h).

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cfloat>
#include <cstdint>
#include <type_traits>

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

// ---- scale stores of the group layouts ---------------------------------------------------------

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

// ---- a lane's values -------------------------------------------------------------------------

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

// ---- maxima across a block ----------------------------------------------------------------------

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

}  // namespace fp8route::kernels
