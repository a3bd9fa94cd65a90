// A temporary directory of this test process's own (ctest runs tests in parallel, one process
// each), removed when the process exits.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <string>

namespace squeeze::testing {

inline std::string temp_path(const std::string& name) {
  namespace fs = std::filesystem;
  static const struct Dir {
    fs::path path;
    Dir() : path(fs::temp_directory_path() / ("squeeze_test_" + std::to_string(getpid()))) {
      fs::create_directories(path);
    }
    ~Dir() {
      std::error_code ec;
      fs::remove_all(path, ec);
    }
  } dir;
  return (dir.path / name).string();
}

}  // namespace squeeze::testing
