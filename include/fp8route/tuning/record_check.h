#pragma once
// A measurement record handed in from outside the library (Python's save_table: the dicts of
// Fp8Linear.probe), checked before a table is built from it.

#include <cstdint>
#include <string>

#include "fp8route/route.h"

namespace fp8route {

// The record of these fields, scale and out by name. Throws Error(invalid_argument), the message
// starting with `where` (say "timings[3]"), when scale or out does not parse, unless m, n, k >= 1 and
// us > 0, or when the backend has no such config.
MeasurementRecord checked_measurement_record(const std::string& where, int64_t m, int64_t n, int64_t k,
                                             const std::string& scale, const std::string& out,
                                             std::string backend, std::string config, double us);

}  // namespace fp8route
