#pragma once
// A folder of this test process's own in the temp folder, removed at exit, and files written in it
// (the file readers take paths).

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace fp8route::test_files {

inline const std::filesystem::path& temp_dir() {
  static const struct Dir {
    std::filesystem::path path =
        std::filesystem::temp_directory_path() / ("fp8route_test_" + std::to_string(::getpid()));
    Dir() { std::filesystem::create_directories(path); }
    ~Dir() {
      std::error_code ec;
      std::filesystem::remove_all(path, ec);
    }
  } dir;
  return dir.path;
}

// Writes `text` to temp_dir()/name and returns the path.
inline std::string temp_file(const std::string& name, const std::string& text) {
  const std::string path = (temp_dir() / name).string();
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

}  // namespace fp8route::test_files
