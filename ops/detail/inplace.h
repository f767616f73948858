// Internal. How an in-place op records autograd: it runs its out-of-place form (which saves what
// its backward needs without that being overwritten), writes the result into self, and self takes
// over the result's history.
#pragma once

#include "nabla/core/autograd/grad_mode.h"
#include "nabla/ops/autograd/function.h"
#include "nabla/ops/copy.h"

namespace nabla::ops {

// Writes `result` into self and gives self its history (autograd::rebase_history).
inline Tensor& commit_in_place(Tensor& self, const Tensor& result) {
  {
    NoGradGuard no_grad;
    copy_(self, result);
  }
  autograd::rebase_history(self, result);
  return self;
}

}  // namespace nabla::ops
