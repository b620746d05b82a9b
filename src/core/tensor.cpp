#include "fp8route/tensor.h"

#include <sstream>

#include "fp8route/error.h"

namespace fp8route {

TensorView TensorView::contiguous(void* data, DType dtype, std::initializer_list<int64_t> shape,
                                  Device device) {
  FP8ROUTE_CHECK(shape.size() <= kMaxDims, "tensor: at most " << kMaxDims << " dims");
  TensorView t;
  t.data = data;
  t.dtype = dtype;
  t.device = device;
  t.ndim = static_cast<int>(shape.size());
  int d = 0;
  for (int64_t s : shape) t.shape[d++] = s;
  int64_t stride = 1;
  for (int i = t.ndim - 1; i >= 0; --i) {
    t.strides[i] = stride;
    stride *= t.shape[i];
  }
  return t;
}

TensorView TensorView::strided(void* data, DType dtype, std::initializer_list<int64_t> shape,
                               std::initializer_list<int64_t> strides, Device device) {
  FP8ROUTE_CHECK(shape.size() == strides.size(),
                 "tensor: " << shape.size() << " sizes but " << strides.size() << " strides");
  TensorView t = contiguous(data, dtype, shape, device);
  int d = 0;
  for (int64_t s : strides) t.strides[d++] = s;
  return t;
}

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int i = 0; i < ndim; ++i) n *= shape[i];
  return n;
}

bool TensorView::is_contiguous() const {
  int64_t stride = 1;
  for (int i = ndim - 1; i >= 0; --i) {
    if (shape[i] != 1 && strides[i] != stride) return false;
    stride *= shape[i];
  }
  return true;
}

std::string shape_string(const TensorView& t) {
  std::ostringstream os;
  os << "[";
  for (int i = 0; i < t.ndim; ++i) os << (i ? "," : "") << t.shape[i];
  os << "]";
  return os.str();
}

std::string to_string(const TensorView& t) {
  std::ostringstream os;
  os << dtype_name(t.dtype) << shape_string(t) << " strides [";
  for (int i = 0; i < t.ndim; ++i) os << (i ? "," : "") << t.strides[i];
  os << "] " << (t.device.type == DeviceType::cpu ? "cpu" : "cuda:") ;
  if (t.device.type == DeviceType::cuda) os << t.device.index;
  return os.str();
}

}  // namespace fp8route
