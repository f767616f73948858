// Public header (for custom ops). Recording a differentiable op: the forward plus a gradient
// lambda, as in flashlight.
//
//   Tensor out = compute(a, b);
//   if (autograd::needs_grad({a, b})) {
//     autograd::record("mul", {a, b}, {out}, /*save=*/{a, b}, [](autograd::BackwardContext& ctx) {
//       return TensorList{ctx.grad() * ctx.saved[1], ctx.grad() * ctx.saved[0]};
//     });
//   }
//
// Tensors the lambda needs go through `save` (never captured): they are version-checked when
// backward runs and freed after it. Non-tensor data (shapes, scalars) is captured by value.
#pragma once

#include <functional>
#include <initializer_list>
#include <vector>

#include "nabla/core/autograd/grad_mode.h"
#include "nabla/core/autograd/node.h"
#include "nabla/core/tensor.h"

namespace nabla::autograd {

struct BackwardContext {
  TensorList grads;  // one per forward output (zeros where none flowed, for multi-output ops)
  TensorList saved;  // the tensors passed as `save`, version-checked
  std::vector<bool> needs_input_grad;
  // The saved tensors are freed once the backward returns (no retain_graph, no create_graph): a
  // formula may then write its result over a saved tensor nobody else holds.
  bool releases_saved = false;

  const Tensor& grad(size_t i = 0) const { return grads[i]; }
  bool needs(size_t input) const { return needs_input_grad[input]; }
};

using BackwardFn = std::function<TensorList(BackwardContext&)>;

// True when grad mode is on and any defined tensor in the list requires grad.
bool needs_grad(std::initializer_list<std::reference_wrapper<const Tensor>> tensors);
bool needs_grad(const TensorList& tensors);

// The edge a gradient for `t` flows along: its grad_fn, or its leaf accumulator.
Edge gradient_edge(const Tensor& t);

// Creates the backward node for an op and makes it the grad_fn of every output. `name` must be
// a string literal. Inputs that are undefined or need no grad get no edge.
void record(const char* name, const TensorList& inputs, const TensorList& outputs, const TensorList& save,
            BackwardFn backward);

// For in-place ops: refuses what autograd cannot track (a leaf that requires grad while grad
// mode is on; a view of a tensor that requires grad), naming `op`.
void check_inplace(const Tensor& self, const char* op);
// After a write to `t` that no nabla op made (a custom function's kernel): values the step
// compiler would compute again from t (Note [Recomputed saved values]) refuse to at unpack.
void note_unseen_inplace_write(const Tensor& t);

// Makes `self` (just overwritten in place with the values of `result`) take over `result`'s
// history, so gradients flow through the in-place op.
void rebase_history(const Tensor& self, const Tensor& result);

}  // namespace nabla::autograd
