// fp8route info: what this machine has and what of fp8route can run on it, and why not.

#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "fp8route/device.h"
#include "fp8route/moe.h"
#include "fp8route/route.h"
#include "fp8route/status.h"
#include "fp8route/tuning/route_log.h"

namespace fp8route::cli {

int run_info(const InfoOptions& opt) {
  const LibraryVersions v = library_versions();
  const int n = cuda_device_count();
  const std::vector<ComponentStatus> components = component_status(n > 0 ? 0 : -1);
  // The routing table scaled_mm() uses (default_router(): $FP8ROUTE_TABLE, else the first
  // routes/h200.json found; when none is, the load error lists the places looked in).
  const std::shared_ptr<const Router> router = default_router();
  const std::string table_path = default_table_path();
  const TableStamp& ts = router->table().stamp;
  const std::string table_line =
      router->load_error().empty()
          ? table_path + ": " + std::to_string(router->table().entries.size()) + " entries, measured on " + ts.gpu +
                " (" + std::to_string(ts.sm_count) + " SMs, CUDA " + ts.cuda + ", cuBLASLt " + ts.cublaslt + ") on " +
                ts.date
          : "not loaded (" + router->load_error() + "): routing by the heuristic rules";
  // A table measured on another GPU model than device 0 ("" when it matches, or there is no GPU).
  const std::string table_warning =
      router->load_error().empty() && n > 0 ? route_log::gpu_mismatch_warning(ts.gpu, device_info(0).name) : "";

  // The grouped routing table grouped_scaled_mm() uses (docs/moe.md, Routing); none is no error.
  const GroupedTableInfo grouped = grouped_table_info();
  const std::string grouped_line =
      !grouped.path.empty()
          ? grouped.path + ": " + std::to_string(grouped.entries) + " entries, measured on " + grouped.stamp.gpu +
                " on " + grouped.stamp.date
          : grouped.load_error.empty()
                ? "none found: grouped calls routed by the rule (FP8ROUTE_GROUPED_TABLE names one)"
                : "not loaded (" + grouped.load_error + "): grouped calls routed by the rule";

  if (opt.json) {
    nlohmann::json j;
    j["fp8route"] = v.fp8route;
    j["cuda_runtime"] = cuda_version_string(v.cuda_runtime);
    j["cuda_driver"] = cuda_version_string(v.cuda_driver);
    j["cublaslt"] = cublas_version_string(v.cublaslt);
    j["devices"] = nlohmann::json::array();
    for (int d = 0; d < n; ++d) {
      const DeviceInfo& di = device_info(d);
      j["devices"].push_back({{"index", d}, {"name", di.name}, {"sm", di.sm_version()},
                              {"sm_count", di.sm_count}, {"l2_bytes", di.l2_bytes},
                              {"memory_bytes", di.global_mem_bytes}});
    }
    if (n == 0) j["no_gpu_reason"] = cuda_unavailable_reason();
    j["routing_table"] = table_line;
    j["routing_table_path"] = table_path;  // "" when none was found
    j["routing_table_load_error"] = router->load_error();
    j["routing_table_warning"] = table_warning;
    j["grouped_routing_table"] = grouped_line;
    j["grouped_routing_table_path"] = grouped.path;  // "" when none is in use
    j["grouped_routing_table_load_error"] = grouped.load_error;
    j["components"] = nlohmann::json::array();
    for (const auto& c : components)
      j["components"].push_back({{"name", c.name}, {"usable", c.usable}, {"reason", c.reason}});
    // A path or a device name need not be UTF-8; JSON output must be.
    std::printf("%s\n", j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    return 0;
  }

  std::printf("fp8route %s\n", v.fp8route.c_str());
  std::printf("CUDA runtime %s, driver %s, cuBLASLt %s\n", cuda_version_string(v.cuda_runtime).c_str(),
              cuda_version_string(v.cuda_driver).c_str(), cublas_version_string(v.cublaslt).c_str());
  if (n == 0) {
    std::printf("GPU: none (%s)\n", cuda_unavailable_reason().c_str());
  }
  for (int d = 0; d < n; ++d) {
    const DeviceInfo& di = device_info(d);
    std::printf("GPU %d: %s, SM %d.%d, %d SMs, L2 %.1f MB, memory %.1f GB\n", d, di.name.c_str(),
                di.sm_major, di.sm_minor, di.sm_count, di.l2_bytes / 1e6, di.global_mem_bytes / 1e9);
  }
  std::printf("routing table: %s\n", table_line.c_str());
  if (!table_warning.empty()) std::printf("%s\n", table_warning.c_str());
  std::printf("grouped routing table: %s\n", grouped_line.c_str());
  std::printf("\n%-28s %-8s %s\n", "component", "usable", "why");
  for (const auto& c : components)
    std::printf("%-28s %-8s %s\n", c.name.c_str(), c.usable ? "yes" : "no", c.reason.c_str());
  return 0;
}

}  // namespace fp8route::cli
