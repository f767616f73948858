// What the interop tests share: whether Debian's PyTorch (/usr/bin/python3 with torch) is there,
// so each test can skip itself, with a message, only when it is not.
#pragma once

#include <cstdlib>

namespace nabla::testing {

inline bool debian_torch_available() {
  static const bool ok = std::system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") == 0;
  return ok;
}

}  // namespace nabla::testing
