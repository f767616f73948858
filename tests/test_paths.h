// Where tests find their helper files and the build's programs, without compiling a path in.
//
// An absolute path in a compile definition (the source root, $<TARGET_FILE:...>) changes the
// compiler command for every clone folder, so ccache misses on a fresh clone; and a path taken
// from __FILE__ fails wherever the binary runs away from the tree it was built in. Instead:
//   - source_file("tests/data/x.py"): under $NABLA_SOURCE_DIR (CTest sets it for every test;
//     tests/CMakeLists.txt), else the tree the binary sits in (<root>/build/<preset>/tests/<bin>,
//     as on the GPU machine), else the working directory;
//   - build_file("../apps/nabla-train"): relative to the folder of the running test binary.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>

namespace nabla::testing {

inline std::filesystem::path test_binary_dir() {
  std::error_code error;
  auto exe = std::filesystem::read_symlink("/proc/self/exe", error);
  return error ? std::filesystem::current_path() : exe.parent_path();
}

inline std::filesystem::path build_file(const std::string& relative) {
  return (test_binary_dir() / relative).lexically_normal();
}

inline std::filesystem::path source_file(const std::string& relative) {
  namespace fs = std::filesystem;
  if (const char* root = std::getenv("NABLA_SOURCE_DIR"); root != nullptr && *root != '\0') {
    return fs::path(root) / relative;
  }
  const fs::path from_binary = test_binary_dir().parent_path().parent_path().parent_path() / relative;
  std::error_code error;
  if (fs::exists(from_binary, error)) return from_binary;
  return fs::current_path() / relative;
}

}  // namespace nabla::testing
