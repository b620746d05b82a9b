// libFuzzer target: load_grouped_table, grouped routing tables; fuzz_readers.h says what must hold.

#include <cstddef>
#include <cstdint>

#include "fuzz_readers.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = fp8route::fuzz::scratch_path("grouped_table");
  fp8route::fuzz::write_file(path, data, size);
  fp8route::fuzz::grouped_table(path);
  return 0;
}
