#include "nabla/core/dispatch.h"

#include "nabla/core/error.h"

namespace nabla {

void built_without_cuda(const char* op) {
  NABLA_CHECK(
      false,
      "{}: the tensor is on a CUDA device, but this nabla was built without CUDA (NABLA_CUDA=OFF, or "
      "no toolkit at /usr/local/cuda); rebuild with the toolkit (cmake --preset cuda) or use CPU tensors",
      op);
  __builtin_unreachable();
}

}  // namespace nabla
