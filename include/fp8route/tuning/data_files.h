#pragma once
// Where the data files fp8route ships (routes/h200.json, shapes/models.json) are looked for when
// none is named: a staged or installed binary has no source tree to read them from.

#include <string>
#include <vector>

namespace fp8route {

// The places `relative` (say "routes/h200.json") is looked for, in order:
//   $FP8ROUTE_DATA_DIR/<relative>, when that is set (a folder holding routes/ and shapes/: an
//     installed tree moved elsewhere; the wheel's `fp8route` console script sets it to the package);
//   $FP8ROUTE_SOURCE_DIR/<relative>, when that is set (a source tree copied elsewhere);
//   <dir>/<relative> and <dir>/../share/fp8route/<relative>, <dir> being the folder of the shared
//     object this code is linked into (a Python module of a wheel: fp8route/routes/h200.json; an
//     installed libfp8route.so in <prefix>/lib), then of the executable (scripts/stage_gpu.sh puts
//     routes/ beside the binaries; `cmake --install` puts the binaries in <prefix>/bin and the data
//     in <prefix>/share/fp8route);
//   <CMAKE_INSTALL_PREFIX>/share/fp8route/<relative>, the prefix configured when this was built (the
//     static library inside a consumer's executable that lives elsewhere); not in a wheel;
//   the source tree this was built from.
std::vector<std::string> data_file_candidates(const std::string& relative);
// The first of them that exists; "" when none does.
std::string find_data_file(const std::string& relative);
// "no <relative> found (looked for <every candidate>)", for an error message.
std::string data_file_not_found(const std::string& relative);

}  // namespace fp8route
