// What the interop tests share: whether Debian's PyTorch (/usr/bin/python3 with torch) is there,
// so each test can skip itself, with a message, only when it is not.
#pragma once

#include <cstdlib>
#include <string>

namespace nabla::testing {

inline bool debian_torch_available() {
  static const bool ok = std::system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") == 0;
  return ok;
}

// The interpreter of the tests that compare with PyTorch on the GPU: $NABLA_TORCH_PYTHON (the GPU
// machine's python3, which holds PyTorch 2.11), else Debian's /usr/bin/python3.
inline std::string torch_python() {
  const char* set = std::getenv("NABLA_TORCH_PYTHON");
  return set != nullptr && *set != '\0' ? set : "/usr/bin/python3";
}

inline bool torch_python_available() {
  static const bool ok =
      std::system((torch_python() + " -c 'import torch, torchvision' >/dev/null 2>&1").c_str()) == 0;
  return ok;
}

}  // namespace nabla::testing
