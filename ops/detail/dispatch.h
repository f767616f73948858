// Internal. Shared checks for op front ends, and the backend dispatch they all call
// (nabla::dispatch, core/dispatch.h: Note [One backend dispatch]).
#pragma once

#include <functional>
#include <initializer_list>

#include "nabla/core/dispatch.h"
#include "nabla/core/tensor.h"

namespace nabla::ops {

using nabla::dispatch;
using nabla::kHasCuda;

// Checks that every defined tensor is on the same device as the first; names `op` and both.
void check_same_device(const char* op, std::initializer_list<std::reference_wrapper<const Tensor>> tensors);
void check_defined(const char* op, const Tensor& t, const char* arg);

}  // namespace nabla::ops
