#include "fp8route/status.h"

#include "fp8route/device.h"
#include "fp8route/gemm.h"

namespace fp8route {

namespace {

struct Component {
  const char* name;
  bool built;               // compiled into this build
  const char* not_built;    // why not, when it is not
};

// Components that are not GEMM backends (those are asked of the GEMM registry below).
constexpr Component kComponents[] = {
    {"quant (group, token, tensor)", true, ""},
};

// Why no config of `backend` can run a plain aligned GEMM, or "" when one can.
std::string gemm_backend_reason(const std::string& backend) {
  std::string first;
  for (int64_t m : {1, 256})  // a decode and a prefill-sized problem: backends serve M ranges
    for (ScaleKind kind : {ScaleKind::tensor, ScaleKind::row, ScaleKind::block})
      for (const std::string& c : gemm_configs(backend)) {
        const std::string why = gemm_supports(backend, c, make_problem(m, 4096, 4096, kind));
        if (why.empty()) return "";
        if (first.empty()) first = why;
      }
  return first;
}

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
  // GEMM backends: what their own supports() says of a plain aligned GEMM.
  for (const std::string& b : gemm_backends()) {
    ComponentStatus s{"gemm backend " + b, false, gpu_reason};
    try {
      const std::string why = gemm_backend_reason(b);
      if (!why.empty()) s.reason = why;
    } catch (const std::exception& e) {
      s.reason = e.what();
    }
    s.usable = s.reason.empty();
    if (s.usable) s.reason = std::to_string(gemm_configs(b).size()) + " configs";
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace fp8route
