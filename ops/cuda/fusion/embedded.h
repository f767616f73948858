// Internal (ops/cuda/fusion). The texts NVRTC compiles generated kernels against, embedded in the
// library at build time (ops/CMakeLists.txt writes embedded_headers.cpp from the files
// themselves): the prelude under fusion::kPreludeName, and the formula headers under the names
// they are included by ("nabla/ops/detail/elementwise_formulas.h", ...).
#pragma once

#include <span>

namespace nabla::ops::cuda::fusion {

struct EmbeddedHeader {
  const char* name;
  const char* text;
};

std::span<const EmbeddedHeader> embedded_headers();

}  // namespace nabla::ops::cuda::fusion
