// libFuzzer target: tools::load_shape_file, the files of the tool's --shapes; fuzz_readers.h says what must hold.

#include <cstddef>
#include <cstdint>

#include "fuzz_readers.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = fp8route::fuzz::scratch_path("shape_file");
  fp8route::fuzz::write_file(path, data, size);
  fp8route::fuzz::shape_file(path);
  return 0;
}
