#include "fp8route/status.h"

#include "fp8route/device.h"

namespace fp8route {

namespace {

struct Component {
  const char* name;
  bool built;               // compiled into this build
  const char* not_built;    // why not, when it is not
};

// GEMM backends arrive with their own issues; until then `info` says so instead of pretending.
constexpr Component kComponents[] = {
    {"quant (group, token, tensor)", true, ""},
    {"gemm backend cublaslt", false, "not in this build yet (GEMM backends issue)"},
    {"gemm backend cutlass_sm90", false, "not in this build yet (GEMM backends issue)"},
    {"gemm backend skinny", false, "not in this build yet (small-M backend issue)"},
    {"gemm backend reference", false, "not in this build yet (GEMM backends issue)"},
};

}  // namespace

std::vector<ComponentStatus> component_status(int device) {
  std::string gpu_reason;
  if (device < 0 || cuda_device_count() == 0) {
    gpu_reason = "no GPU: " + (cuda_device_count() == 0 ? cuda_unavailable_reason()
                                                         : std::string("none selected"));
  } else {
    const DeviceInfo& d = device_info(device);
    if (!d.is_sm90())
      gpu_reason = "needs SM 9.0 (Hopper); " + d.name + " is SM " + std::to_string(d.sm_major) +
                   "." + std::to_string(d.sm_minor);
  }
  std::vector<ComponentStatus> out;
  for (const Component& c : kComponents) {
    ComponentStatus s{c.name, false, ""};
    if (!c.built) {
      s.reason = c.not_built;
    } else if (!gpu_reason.empty()) {
      s.reason = gpu_reason;
    } else {
      s.usable = true;
      s.reason = "sm_90a kernels";
    }
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace fp8route
