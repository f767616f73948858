// Internal (ops only). The results of a fused backward kernel have no derivative of their own:
// a double backward (create_graph) through them must fail with a clear error, not silently drop
// terms. refuse_double_backward records, on those results, a node that raises
// "{name}: double backward through {what} is not supported" if it is ever reached.
//
//   Tensor dx = my_backward_kernel(grad, x);  // under NoGradGuard
//   autograd::refuse_double_backward("my_op_backward", {grad, x}, {dx}, "my_op");
#pragma once

#include "nabla/core/error.h"
#include "nabla/ops/autograd/function.h"

namespace nabla::autograd {

// `name` and `what` must be string literals. Does nothing when no input needs a gradient.
inline void refuse_double_backward(const char* name, const TensorList& inputs, const TensorList& outputs,
                                   const char* what = "this op") {
  if (!needs_grad(inputs)) return;
  record(name, inputs, outputs, {}, [name, what](BackwardContext&) -> TensorList {
    NABLA_CHECK(false, "{}: double backward through {} is not supported", name, what);
    return {};
  });
}

}  // namespace nabla::autograd
