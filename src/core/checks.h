#pragma once
// Argument checks shared by the launchers: each throws Error(invalid_argument) naming the tensor
// and the rule, before anything is enqueued.

#include <cstdint>
#include <initializer_list>
#include <string>

#include "fp8route/device.h"
#include "fp8route/error.h"
#include "fp8route/tensor.h"

namespace fp8route::detail {

// Elements of t, or -1 when the count does not fit in int64 (sizes must be checked >= 0 first).
inline int64_t checked_numel(const TensorView& t) {
  int64_t n = 1;
  for (int i = 0; i < t.ndim; ++i)
    if (__builtin_mul_overflow(n, t.shape[i], &n)) return -1;
  return n;
}

// A view the launchers can read: rank in [0, kMaxDims], sizes >= 0 with a product that fits,
// CUDA memory, and a pointer unless it has no elements (DLPack and torch give an empty tensor a
// null pointer, and an empty problem reads nothing).
inline void check_device_tensor(const TensorView& t, const char* name) {
  FP8ROUTE_CHECK(t.ndim >= 0 && t.ndim <= kMaxDims, name << ": rank " << t.ndim << " outside [0, " << kMaxDims << "]");
  for (int i = 0; i < t.ndim; ++i)
    FP8ROUTE_CHECK(t.shape[i] >= 0, name << ": negative size in dim " << i << " (" << to_string(t) << ")");
  const int64_t numel = checked_numel(t);
  FP8ROUTE_CHECK(numel >= 0, name << ": element count overflows 64 bits (" << to_string(t) << ")");
  FP8ROUTE_CHECK(t.data != nullptr || numel == 0, name << ": null pointer");
  FP8ROUTE_CHECK(t.device.type == DeviceType::cuda, name << ": must be CUDA device memory, got " << to_string(t));
  FP8ROUTE_CHECK(t.device.index >= 0, name << ": negative device index in " << to_string(t));
}

// An optional operand was passed: an absent one is the default view (no data, rank 0).
inline bool given(const TensorView& t) { return t.ndim != 0 || t.data != nullptr; }

// t must be on `ref`'s device: one call's tensors live on one GPU.
inline void check_same_device(const TensorView& t, const char* name, const TensorView& ref, const char* ref_name) {
  FP8ROUTE_CHECK(t.device == ref.device, name << " and " << ref_name << ": must be on one device, got " << name
                                              << " " << to_string(t) << " and " << ref_name << " " << to_string(ref));
}

// The bytes t can address: [begin, end), empty for a tensor without elements. Strides may be
// negative. Throws when the span does not fit in the address space (a size or stride too large).
struct ByteSpan {
  uintptr_t begin = 0, end = 0;
};
inline ByteSpan byte_span(const TensorView& t, const char* name) {
  if (checked_numel(t) == 0) return {};
  const int64_t esize = dtype_size(t.dtype);
  __int128 lo = 0, hi = 0;  // element offsets of the lowest and highest element
  for (int i = 0; i < t.ndim; ++i) {
    const __int128 reach = static_cast<__int128>(t.shape[i] - 1) * t.strides[i];
    (reach < 0 ? lo : hi) += reach;
  }
  const __int128 base = static_cast<__int128>(reinterpret_cast<uintptr_t>(t.data));
  const __int128 b = base + lo * esize, e = base + (hi + 1) * esize;
  FP8ROUTE_CHECK(b >= 0 && e <= static_cast<__int128>(UINTPTR_MAX),
                 name << ": sizes and strides reach outside the address space (" << to_string(t) << ")");
  return {static_cast<uintptr_t>(b), static_cast<uintptr_t>(e)};
}

// An output must not share a byte with an input or another output: a kernel would read what it
// already overwrote, or two outputs would overwrite each other. Compared as byte ranges (lowest to
// highest address), so two views interleaved in one buffer count as overlapping.
inline void check_no_overlap(const TensorView& out, const char* out_name, const TensorView& other,
                             const char* other_name) {
  const ByteSpan a = byte_span(out, out_name), b = byte_span(other, other_name);
  if (a.begin == a.end || b.begin == b.end) return;
  FP8ROUTE_CHECK(a.end <= b.begin || b.end <= a.begin,
                 out_name << " and " << other_name << " overlap: " << out_name << " " << to_string(out) << " at ["
                          << reinterpret_cast<void*>(a.begin) << ", " << reinterpret_cast<void*>(a.end) << "), "
                          << other_name << " " << to_string(other) << " at [" << reinterpret_cast<void*>(b.begin)
                          << ", " << reinterpret_cast<void*>(b.end) << ")");
}

// The current device runs `what` (kernels built for sm_90a only), or Error(unsupported) saying why not.
inline void check_sm90_device(const char* what) {
  const DeviceInfo& d = device_info(-1);
  FP8ROUTE_CHECK_CAT(d.is_sm90(), ErrorCategory::unsupported,
                     "device: " << what << " are built for SM 9.0 (sm_90a); " << d.name << " is SM " << d.sm_major
                                << "." << d.sm_minor);
}

inline void check_dtype(const TensorView& t, const char* name, std::initializer_list<DType> allowed) {
  std::string list;
  for (DType d : allowed) {
    if (t.dtype == d) return;
    list += (list.empty() ? "" : ", ") + std::string(dtype_name(d));
  }
  FP8ROUTE_CHECK(false, name << ": dtype " << dtype_name(t.dtype) << " not allowed (expected " << list << ")");
}

inline void check_ndim(const TensorView& t, const char* name, int ndim, const char* what) {
  FP8ROUTE_CHECK(t.ndim == ndim, name << ": expected " << ndim << " dims " << what << ", got " << to_string(t));
}

inline void check_aligned(const void* p, int64_t bytes, const char* name) {
  FP8ROUTE_CHECK(reinterpret_cast<uintptr_t>(p) % bytes == 0,
                 name << ": pointer " << p << " must be " << bytes << "-byte aligned");
}

// t must be exactly `shape`, contiguous row-major.
inline void check_contiguous_shape(const TensorView& t, const char* name, const int64_t* shape, int ndim) {
  bool same = t.ndim == ndim;
  for (int i = 0; same && i < ndim; ++i) same = t.shape[i] == shape[i];
  std::string want = "[";
  for (int i = 0; i < ndim; ++i) want += (i ? "," : "") + std::to_string(shape[i]);
  want += "]";
  FP8ROUTE_CHECK(same, name << ": expected shape " << want << ", got " << to_string(t));
  FP8ROUTE_CHECK(t.is_contiguous(), name << ": must be contiguous, got " << to_string(t));
}

}  // namespace fp8route::detail
