// libFuzzer target: read_tune_raw, tune's raw files; fuzz_readers.h says what must hold.

#include <cstddef>
#include <cstdint>

#include "fuzz_readers.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = fp8route::fuzz::scratch_path("tune_raw");
  fp8route::fuzz::write_file(path, data, size);
  fp8route::fuzz::tune_raw(path);
  return 0;
}
