#pragma once
// Device helpers of the row quantizations, per-token (token_kernel.cuh) and per-tensor
// (tensor_kernel.cuh): their parameters, and rows of any width.

#include <cstdint>
#include <type_traits>

#include "core/chain_trace.cuh"
#include "quant/common.cuh"

namespace fp8route::kernels {

// ---- rows --------------------------------------------------------------------------------------

constexpr int kRowThreads = 256;
constexpr int kRowItems = 4;  // 16-byte loads in flight per thread in the grid-stride kernels

// Rows of any width. The row kernels take a template flag kAligned: true when H % 8 == 0,
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

struct RowQuantParams {
  const void* x;
  int64_t x_stride_t;  // elements
  int64_t rows, hidden;
  uint8_t* q;
  float* s;            // per-token: [rows]; per-tensor: [1]
  const float* static_scale;  // per-tensor static
  float qmax;
  bool int8, pow2;
  // Scatter (per-token kernel, kScatter): token t's codes and scale go to rows src2dst[t, j] of q and
  // s (dst_rows of them), j < topk, instead of row t. owner: the owner table of a launch with more
  // entries than kScatterScanEntries (quant_launch::scatter_owners), else null.
  const int32_t* src2dst;
  const int32_t* owner;
  int32_t topk, dst_rows;
  bool unique_rows;  // scatter: the caller promised no row is named twice (no owner to find)
  // Masked (per-token kernel, kMasked): rows are [E, m_max] slabs; row t of slab e = t / m_max is
  // neither read nor written when t % m_max >= masked_m[e] (clamped to [0, m_max]).
  const int32_t* masked_m;
  int32_t m_max;
  FP8ROUTE_TRACE_FIELD  // the per-token kernel, in a chain-trace build
};

}  // namespace fp8route::kernels
