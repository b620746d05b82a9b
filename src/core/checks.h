#pragma once
// Argument checks shared by the launchers: each throws Error(invalid_argument) naming the tensor
// and the rule, before anything is enqueued.

#include <cstdint>
#include <initializer_list>
#include <string>

#include "fp8route/error.h"
#include "fp8route/tensor.h"

namespace fp8route::detail {

inline void check_device_tensor(const TensorView& t, const char* name) {
  FP8ROUTE_CHECK(t.data != nullptr, name << ": null pointer");
  FP8ROUTE_CHECK(t.device.type == DeviceType::cuda, name << ": must be CUDA device memory, got " << to_string(t));
  for (int i = 0; i < t.ndim; ++i)
    FP8ROUTE_CHECK(t.shape[i] >= 0, name << ": negative size in dim " << i << " (" << to_string(t) << ")");
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
