// libFuzzer target: tools::load_catalog, shapes/models.json; fuzz_readers.h says what must hold.

#include <cstddef>
#include <cstdint>

#include "fuzz_readers.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = fp8route::fuzz::scratch_path("catalog");
  fp8route::fuzz::write_file(path, data, size);
  fp8route::fuzz::catalog(path);
  return 0;
}
