// Routing diagnostics on stderr (route_log.h).

#include "fp8route/tuning/env.h"
#include "fp8route/tuning/route_log.h"

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <set>
#include <utility>

#include "fp8route/device.h"

namespace fp8route::route_log {

namespace {

// Trimmed and lower-cased: "NVIDIA H200 " and "nvidia h200" are one model.
std::string model_key(const std::string& name) {
  size_t b = 0, e = name.size();
  while (b < e && std::isspace(static_cast<unsigned char>(name[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(name[e - 1]))) --e;
  std::string key = name.substr(b, e - b);
  for (char& c : key) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return key;
}

}  // namespace

std::string gpu_mismatch_warning(const std::string& table_gpu, const std::string& device_gpu) {
  const std::string table = model_key(table_gpu), device = model_key(device_gpu);
  if (table.empty() || device.empty() || table == device) return "";
  return "fp8route warning: the routing table in use was measured on " + table_gpu + ", this GPU is " + device_gpu +
         ": its choices may not be the fastest here (fp8route tune or fp8route probe on this GPU writes a table "
         "measured here; FP8ROUTE_TABLE=FILE routes by it)";
}

std::string decision_line(std::string_view caller, const GemmProblem& p, const Route& r) {
  std::string line = "fp8route route: " + std::string(caller) + " m=" + std::to_string(p.m) + " n=" +
                     std::to_string(p.n) + " k=" + std::to_string(p.k) + " scale=" + std::string(name(p.scale)) +
                     " out=" + std::string(dtype_name(p.out));
  if (p.bias) line += " bias";
  if (p.align < 16) line += " align=" + std::to_string(p.align);
  if (p.accum == Accum::precise) line += " accum=precise";
  return line + " -> " + r.backend + "/" + r.config + " (" + std::string(name(r.source)) + ")";
}

bool enabled() {
  static const bool on = [] {
    const auto v = env::get("FP8ROUTE_LOG");
    return v && *v != "0";
  }();
  return on;
}

namespace {

// Each distinct line once per process: a warning per pair, a decision once.
void print_once(const std::string& a, const std::string& b = "") {
  if (a.empty() && b.empty()) return;
  static std::mutex mu;
  static std::set<std::string> printed;
  std::lock_guard<std::mutex> lock(mu);
  for (const std::string* s : {&a, &b})
    if (!s->empty() && printed.insert(*s).second) std::fprintf(stderr, "%s\n", s->c_str());
  std::fflush(stderr);
}

}  // namespace

void decided(std::string_view caller, const Router& router, const GemmProblem& p, const Route& r) {
  std::string warning;
  if (const std::string& table_gpu = router.table().stamp.gpu; !table_gpu.empty() && cuda_device_count() > 0)
    warning = gpu_mismatch_warning(table_gpu, device_info().name);
  print_once(warning, enabled() ? decision_line(caller, p, r) : std::string());
}

void note(const std::string& line) {
  if (enabled()) print_once(line);
}

void always(const std::string& line) { print_once(line); }

}  // namespace fp8route::route_log
