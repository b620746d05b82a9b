#pragma once
// Which parts of fp8route can run on a device, and why not: what `fp8route info` prints.

#include <string>
#include <vector>

namespace fp8route {

struct ComponentStatus {
  std::string name;
  bool usable = false;
  std::string reason;  // why not, or what it runs on
};

// Status of every component for `device` (-1: no device, every GPU component reports why).
std::vector<ComponentStatus> component_status(int device);

}  // namespace fp8route
