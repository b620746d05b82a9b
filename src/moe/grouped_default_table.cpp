// The process-wide grouped routing table (include/fp8route/moe.h, docs/moe.md "Routing"): which file,
// loaded once at the first routed grouped call, replaced or dropped on request.

#include <algorithm>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "fp8route/device.h"
#include "fp8route/moe.h"
#include "fp8route/tuning/data_files.h"
#include "fp8route/tuning/env.h"
#include "moe/backend.h"

namespace fp8route {

namespace {

struct DefaultTable {
  std::mutex mu;
  bool tried = false;  // the default file was looked for
  std::shared_ptr<const GroupedRoutingTable> table;
  std::string path, error;
};

DefaultTable& default_state() {
  static DefaultTable d;
  return d;
}

}  // namespace

std::vector<std::string> default_grouped_table_files() {
  static constexpr std::pair<const char*, const char*> kTables[] = {{"H200", "routes/h200-grouped.json"},
                                                                     {"H100", "routes/h100-grouped.json"}};
  const std::string gpu = cuda_device_count() > 0 ? device_info(0).name : "";
  std::vector<std::string> files;
  for (const auto& [model, file] : kTables)  // this GPU's first
    if (gpu.find(model) != std::string::npos) files.push_back(file);
  for (const auto& [model, file] : kTables)
    if (std::find(files.begin(), files.end(), file) == files.end()) files.push_back(file);
  return files;
}

std::string default_grouped_table_path() {
  if (const auto t = env::get("FP8ROUTE_GROUPED_TABLE")) return *t;
  for (const std::string& f : default_grouped_table_files())
    if (std::string path = find_data_file(f); !path.empty()) return path;
  return "";
}

namespace moe {

// The process-wide table (nullptr: none), loaded once at the first call.
std::shared_ptr<const GroupedRoutingTable> default_grouped_table() {
  DefaultTable& d = default_state();
  std::lock_guard<std::mutex> lock(d.mu);
  if (!d.tried) {
    d.tried = true;
    const std::string path = default_grouped_table_path();
    if (!path.empty()) {
      try {
        d.table = std::make_shared<const GroupedRoutingTable>(load_grouped_table(path));
        d.path = path;
      } catch (const std::exception& e) {  // a damaged file routes by the rule; info() says why
        d.error = e.what();
      }
    }
  }
  return d.table;
}

}  // namespace moe

void load_default_grouped_table(const std::string& path) {
  std::shared_ptr<const GroupedRoutingTable> t;
  if (!path.empty()) t = std::make_shared<const GroupedRoutingTable>(load_grouped_table(path));
  DefaultTable& d = default_state();
  std::lock_guard<std::mutex> lock(d.mu);
  d.tried = true;
  d.table = std::move(t);
  d.path = path;
  d.error.clear();
}

GroupedTableInfo grouped_table_info() {
  moe::default_grouped_table();  // the first look, if no call made it yet
  DefaultTable& d = default_state();
  std::lock_guard<std::mutex> lock(d.mu);
  GroupedTableInfo info;
  info.path = d.table ? d.path : "";
  info.load_error = d.error;
  if (d.table) info.entries = d.table->entries.size(), info.stamp = d.table->stamp;
  return info;
}

}  // namespace fp8route
