#include "nabla/ops/detail/dispatch.h"

namespace nabla::ops {

void check_same_device(const char* op, std::initializer_list<std::reference_wrapper<const Tensor>> tensors) {
  const Tensor* first = nullptr;
  for (const Tensor& t : tensors) {
    if (!t.defined()) continue;
    if (!first) {
      first = &t;
      continue;
    }
    NABLA_CHECK(t.device() == first->device(), "{}: expected all tensors on one device, got {} and {}", op,
                describe(*first), describe(t));
  }
}

void check_defined(const char* op, const Tensor& t, const char* arg) {
  NABLA_CHECK(t.defined(), "{}: argument '{}' is an undefined tensor", op, arg);
}

}  // namespace nabla::ops
