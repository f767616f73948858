// Internal. Shared checks for op front ends.
#pragma once

#include "nabla/core/tensor.h"

namespace nabla::ops {

// Throws a clear error for an op whose CUDA kernel does not exist yet in this build.
[[noreturn]] void missing_cuda_kernel(const char* op);

// Checks that every defined tensor is on the same device as the first; names `op` and both.
void check_same_device(const char* op, std::initializer_list<std::reference_wrapper<const Tensor>> tensors);
void check_defined(const char* op, const Tensor& t, const char* arg);

}  // namespace nabla::ops
