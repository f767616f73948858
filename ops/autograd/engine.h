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

// From inside a node's backward function: the gradient that other nodes have already sent to
// the node's input `input` (the sum so far), handed over for the node to add into the gradient
// it returns for that input; undefined when there is none to take. A node that takes it must
// return the total: the engine then stores that instead of adding the two itself.
Tensor take_pending_gradient(size_t input);

}  // namespace nabla::autograd
