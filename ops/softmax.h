// Public header. softmax and log_softmax along one dim, computed stably (max-subtracted).
// Float16/bfloat16 inputs compute in float32 and return the input dtype.
#pragma once

#include "nabla/core/tensor.h"

namespace nabla {

Tensor softmax(const Tensor& x, int64_t dim);
Tensor log_softmax(const Tensor& x, int64_t dim);

}  // namespace nabla
