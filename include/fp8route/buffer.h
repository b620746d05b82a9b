#pragma once
// An owning allocation of device memory (cudaMalloc), movable, freed on destruction.

#include <cstddef>
#include <utility>
#include <cstdint>

namespace fp8route {

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes);  // throws Error(cuda_error) when the allocation fails
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& o) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  template <class T>
  T* as() const { return static_cast<T*>(data_); }
  // Gives the memory up without freeing it (cudaFree waits for the whole device, which must not
  // happen while a kernel that may never finish still reads it); returns it.
  void* release() noexcept {
    bytes_ = 0;
    return std::exchange(data_, nullptr);
  }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace fp8route
