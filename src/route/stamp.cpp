// stamp_this_machine (route.h). Not in table.cpp: the table reader and writer there query no GPU,
// so the fuzz targets build them without the rest of the library.

#include <ctime>

#include "fp8route/device.h"
#include "fp8route/route.h"

namespace fp8route {

TableStamp stamp_this_machine() {
  TableStamp s;
  const DeviceInfo& d = device_info(0);
  const LibraryVersions v = library_versions();
  s.gpu = d.name;
  s.sm_count = d.sm_count;
  s.cuda = cuda_version_string(v.cuda_runtime);
  s.cublaslt = cublas_version_string(v.cublaslt);
  s.fp8route = v.fp8route;
  const std::time_t now = std::time(nullptr);
  char date[16];
  std::strftime(date, sizeof date, "%Y-%m-%d", std::gmtime(&now));
  s.date = date;
  return s;
}

}  // namespace fp8route
