// Public header. TensorOptions: dtype, device, memory format and requires_grad for factories.
//
//   auto x = nabla::randn({8, 3}, {.dtype = nabla::kFloat64, .requires_grad = true});
#pragma once

#include "nabla/core/device.h"
#include "nabla/core/dtype.h"
#include "nabla/core/shape.h"

namespace nabla {

struct TensorOptions {
  DType dtype = kFloat32;
  Device device = Device::cpu();
  MemoryFormat memory_format = MemoryFormat::Contiguous;
  bool requires_grad = false;
  // CPU tensors only: page-locked memory from the pinned allocator, so that copies to a CUDA
  // device run asynchronously.
  bool pinned_memory = false;
};

}  // namespace nabla
