// Public header. Copies between dtypes, devices and layouts, with autograd.
#pragma once

#include "nabla/core/tensor.h"

namespace nabla {

// A copy on `device` in `dtype` (the tensor itself when nothing changes). Keeps channels_last.
Tensor to(const Tensor& x, Device device, DType dtype);
Tensor clone(const Tensor& x, MemoryFormat format = MemoryFormat::Preserve);
// Copies src (broadcast to dst's shape, converted to dst's dtype, from any device) into dst.
Tensor& copy_(Tensor& dst, const Tensor& src);

}  // namespace nabla
