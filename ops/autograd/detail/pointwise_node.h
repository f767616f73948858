// Internal (ops). Marks the backward nodes of pointwise ops, which the engine runs as soon as they
// are ready (Note [Pointwise nodes first] in ops/autograd/engine.cpp): the front ends of unary,
// binary, where and dtype-cast ops record their node inside a PointwiseNodeScope.
#pragma once

namespace nabla::autograd::detail {

// Whether the node autograd::record makes now is a pointwise op's.
bool recording_pointwise();

class PointwiseNodeScope {
 public:
  PointwiseNodeScope();
  ~PointwiseNodeScope();
  PointwiseNodeScope(const PointwiseNodeScope&) = delete;
  PointwiseNodeScope& operator=(const PointwiseNodeScope&) = delete;

 private:
  bool outer_;
};

}  // namespace nabla::autograd::detail
