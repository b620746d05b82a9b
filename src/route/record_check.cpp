#include "fp8route/tuning/record_check.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "fp8route/dtype.h"
#include "fp8route/error.h"
#include "fp8route/gemm.h"
#include "fp8route/scale_kind.h"

namespace fp8route {

MeasurementRecord checked_measurement_record(const std::string& where, int64_t m, int64_t n, int64_t k,
                                             const std::string& scale, const std::string& out,
                                             std::string backend, std::string config, double us) {
  MeasurementRecord r;
  r.n = n, r.k = k, r.m = m;
  r.backend = std::move(backend);
  r.config = std::move(config);
  r.us = us;
  try {
    r.scale = parse_scale_kind(scale);
    r.out = parse_dtype(out, "out");
  } catch (const Error& e) {
    FP8ROUTE_FAIL(ErrorCategory::invalid_argument, where << ": " << e.what());
  }
  FP8ROUTE_CHECK(r.m >= 1 && r.n >= 1 && r.k >= 1 && r.us > 0,
                 where << ": m, n, k >= 1 and us > 0, got m=" << r.m << " n=" << r.n << " k=" << r.k
                       << " us=" << r.us);
  const std::vector<std::string> configs = gemm_configs(r.backend);
  FP8ROUTE_CHECK(std::find(configs.begin(), configs.end(), r.config) != configs.end(),
                 where << ": backend " << r.backend << " has no config '" << r.config << "'");
  return r;
}

}  // namespace fp8route
