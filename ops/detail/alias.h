// Internal (ops and its backends). alias(): a tensor over `base`'s storage with new geometry and
// no autograd history. Views build on it (ops/view.cpp records their history), as do backends
// that reinterpret an output buffer. It does no bounds checking: callers compute geometry that
// stays inside the storage. Users get the checked, differentiable version as Tensor::as_strided.
#pragma once

#include <memory>

#include "nabla/core/tensor.h"

namespace nabla::ops {

inline Tensor alias(const Tensor& base, const Shape& sizes, const Shape& strides, int64_t offset) {
  return Tensor(std::make_shared<TensorImpl>(base.storage(), offset, sizes, strides, base.dtype()));
}

}  // namespace nabla::ops
