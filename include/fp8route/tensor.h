#pragma once
// A non-owning view of a strided tensor in host or device memory.

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "fp8route/dtype.h"

namespace fp8route {

enum class DeviceType : uint8_t { cpu, cuda };

struct Device {
  DeviceType type = DeviceType::cuda;
  int index = 0;
  static Device cpu() { return {DeviceType::cpu, 0}; }
  static Device cuda(int i = 0) { return {DeviceType::cuda, i}; }
  bool operator==(const Device&) const = default;
};

inline constexpr int kMaxDims = 4;

struct TensorView {
  void* data = nullptr;
  DType dtype = DType::f32;
  int ndim = 0;
  std::array<int64_t, kMaxDims> shape{};
  std::array<int64_t, kMaxDims> strides{};  // in elements
  Device device{};

  // A contiguous (row-major) view.
  static TensorView contiguous(void* data, DType dtype, std::initializer_list<int64_t> shape,
                               Device device = Device::cuda());
  // A strided view; strides in elements.
  static TensorView strided(void* data, DType dtype, std::initializer_list<int64_t> shape,
                            std::initializer_list<int64_t> strides, Device device = Device::cuda());

  int64_t size(int d) const { return shape[d < 0 ? d + ndim : d]; }
  int64_t stride(int d) const { return strides[d < 0 ? d + ndim : d]; }
  int64_t numel() const;
  bool is_contiguous() const;
  bool defined() const { return data != nullptr; }
};

// "bf16[16,7168] strides [7168,1] cuda:0"
std::string to_string(const TensorView& t);
std::string shape_string(const TensorView& t);

}  // namespace fp8route
