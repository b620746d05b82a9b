#include "fp8route/tuning/env.h"
#include "fp8route/device.h"

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <array>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>

#include "fp8route/tuning/cuda_check.h"
#include "fp8route/version.h"

namespace fp8route {
namespace {

struct Probe {
  int count = 0;
  std::string reason;
};

const Probe& probe() {
  static const Probe p = [] {
    Probe r;
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
      cudaGetLastError();  // clear the sticky error so later calls are not confused by it
      switch (e) {
        case cudaErrorNoDevice: r.reason = "no CUDA-capable device is present"; break;
        case cudaErrorInsufficientDriver:
          r.reason = "no CUDA driver, or one older than this build's CUDA runtime";
          break;
        default: r.reason = std::string("CUDA unavailable: ") + cudaGetErrorString(e);
      }
      return r;
    }
    r.count = n;
    if (n == 0) r.reason = "no CUDA-capable device is present";
    return r;
  }();
  return p;
}

constexpr int kMaxDevices = 64;

}  // namespace

int cuda_device_count() { return probe().count; }

std::string cuda_unavailable_reason() { return probe().reason; }

const DeviceInfo& device_info(int device) {
  static std::array<std::unique_ptr<DeviceInfo>, kMaxDevices> cache;
  static std::array<std::once_flag, kMaxDevices> once;
  FP8ROUTE_CHECK_CAT(cuda_device_count() > 0, ErrorCategory::cuda_error,
                     "device_info: " << cuda_unavailable_reason());
  if (device < 0) FP8ROUTE_CUDA_CHECK(cudaGetDevice(&device));
  FP8ROUTE_CHECK(device < cuda_device_count() && device < kMaxDevices,
                 "device: index " << device << " out of range (" << cuda_device_count()
                                  << " devices)");
  std::call_once(once[device], [device] {
    cudaDeviceProp p{};
    FP8ROUTE_CUDA_CHECK(cudaGetDeviceProperties(&p, device));
    auto info = std::make_unique<DeviceInfo>();
    info->index = device;
    info->name = p.name;
    info->sm_major = p.major;
    info->sm_minor = p.minor;
    info->sm_count = p.multiProcessorCount;
    info->l2_bytes = p.l2CacheSize;
    info->global_mem_bytes = static_cast<int64_t>(p.totalGlobalMem);
    info->smem_per_block_optin = static_cast<int64_t>(p.sharedMemPerBlockOptin);
    cache[device] = std::move(info);
  });
  return *cache[device];
}

namespace {
std::atomic<bool>& pdl_flag() {
  static std::atomic<bool> flag{[] {
    const auto v = env::get("FP8ROUTE_PDL");
    return !(v && *v == "0");
  }()};
  return flag;
}
}  // namespace

void set_programmatic_dependent_launch(bool enabled) { pdl_flag().store(enabled, std::memory_order_relaxed); }
bool programmatic_dependent_launch() { return pdl_flag().load(std::memory_order_relaxed); }

LibraryVersions library_versions() {
  LibraryVersions v;
  v.fp8route = FP8ROUTE_VERSION;
  cudaRuntimeGetVersion(&v.cuda_runtime);
  if (cudaDriverGetVersion(&v.cuda_driver) != cudaSuccess) v.cuda_driver = 0;
  v.cublaslt = static_cast<int>(cublasLtGetVersion());
  return v;
}

std::string cuda_version_string(int v) {
  if (v <= 0) return "none";
  return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
}

std::string cublas_version_string(int v) {
  if (v <= 0) return "none";
  return std::to_string(v / 10000) + "." + std::to_string((v % 10000) / 100) + "." +
         std::to_string(v % 100);
}

}  // namespace fp8route
