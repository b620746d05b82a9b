#pragma once
// What fp8route knows about the GPUs of this machine. Properties are queried once per device and
// cached; nothing here talks to the driver after the first call for a device.

#include <cstdint>
#include <string>

namespace fp8route {

struct DeviceInfo {
  int index = 0;
  std::string name;
  int sm_major = 0, sm_minor = 0;  // compute capability
  int sm_count = 0;
  int64_t l2_bytes = 0;
  int64_t global_mem_bytes = 0;
  int64_t smem_per_block_optin = 0;
  int sm_version() const { return sm_major * 10 + sm_minor; }
  bool is_sm90() const { return sm_major == 9 && sm_minor == 0; }
};

// Number of usable CUDA devices; 0 (never an exception) when there is no driver or no GPU.
int cuda_device_count();
// Why cuda_device_count() is 0, in words ("no CUDA driver", "no CUDA-capable device", ...);
// empty when a device is present.
std::string cuda_unavailable_reason();
// Cached properties of `device` (-1 = the current device). Throws Error(cuda_error) if none.
const DeviceInfo& device_info(int device = -1);

// Programmatic dependent launch: fp8route's kernels that support it may start while the previous
// kernel in the stream finishes (they wait for its results before reading them), which hides
// launch gaps between layers, also inside CUDA graphs. On by default; FP8ROUTE_PDL=0 in the
// environment (read once) or set_programmatic_dependent_launch(false) turns it off for launches
// made afterwards (graphs captured earlier keep what they recorded).
void set_programmatic_dependent_launch(bool enabled);
bool programmatic_dependent_launch();

struct LibraryVersions {
  std::string fp8route;
  int cuda_runtime = 0;  // e.g. 13000
  int cuda_driver = 0;   // 0 when no driver
  int cublaslt = 0;      // cublasLtGetVersion(), e.g. 130100
};
LibraryVersions library_versions();
// 13000 -> "13.0"; 130100 (cuBLAS style) -> "13.1.0"
std::string cuda_version_string(int v);
std::string cublas_version_string(int v);

}  // namespace fp8route
