// Public header. Running backward: gradients of `roots` with respect to every leaf that requires
// grad, accumulated into the leaves' .grad. Tensor::backward() calls this.
#pragma once

#include <functional>

#include "nabla/core/tensor.h"

namespace nabla::autograd {

struct BackwardOptions {
  bool retain_graph = false;  // keep saved tensors for another backward through the same graph
  bool create_graph =
      false;  // record the backward pass itself (higher-order gradients); implies retain_graph
};

// `root_grads[i]` may be undefined when roots[i] has one element (the gradient is then 1).
void backward(const TensorList& roots, const TensorList& root_grads = {}, BackwardOptions options = {});

// Runs `callback` once the backward pass in progress on this thread has finished (every node
// ran, every leaf gradient is accumulated), before backward() returns. For a backward nested
// inside another (a checkpointed segment's recompute), that is the end of the outermost one. Only valid from
// inside a backward pass, e.g. from a gradient hook; DistributedDataParallel uses it to flush its gradient
// buckets at the end of backward.
void queue_callback(std::function<void()> callback);

}  // namespace nabla::autograd
