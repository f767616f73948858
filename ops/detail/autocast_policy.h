// Internal. The autocast policy: the one place that says what each op category does under
// autocast (Note [Autocast policy], docs/design/amp.md). Each front end names its category:
//
//   auto [xa, wa, ba] = ops::autocast(AutocastCategory::LowerPrecision, {x, weight, bias});
//
// The table (category -> ops -> rule), applied only when autocast is on for the inputs'
// device type, and only to floating inputs other than float64 (an explicit float64 computation
// is never lowered):
//
//   LowerPrecision  conv2d, matmul, mm, bmm, linear
//                   -> every input cast to the autocast dtype (float16 or bfloat16). A float32
//                      leaf that requires grad (a parameter) is cast once per outermost scope
//                      (the cast cache in core/autocast.h).
//   Float32         softmax, log_softmax, every loss, layer_norm, rms_norm, exp, expm1, log, log1p,
//                   sin, cos, pow, sum, mean
//                   -> every float16/bfloat16 input cast to float32.
//   Widest          binary elementwise ops (add, sub, mul, div, maximum, minimum, where, ...)
//                   -> mixed inputs promote to the widest floating dtype. This is the ops' own
//                      type promotion, so those front ends only name the category.
//   NormStatistics  batch_norm (and its fused variants)
//                   -> no cast: the activations keep their dtype (float16/bfloat16 stay so,
//                      as cuDNN wants) and the kernels take float32 weight, bias and running
//                      stats and compute the statistics in float32.
//
// Ops not listed (relu, pooling, views, dropout, copies, ...) run in their inputs' dtype.
// The casts are ordinary differentiable ops (to()), so gradients flow back through them and
// land on the float32 leaves in float32. Backward runs with autocast off (ops/autograd/engine.cpp).
#pragma once

#include <array>
#include <cstddef>

#include "nabla/core/tensor.h"

namespace nabla::ops {

enum class AutocastCategory { LowerPrecision, Float32, Widest, NormStatistics };

// The dtype `t` is computed in under `category` with the current autocast state (t's own dtype
// when autocast is off or does not apply).
DType autocast_dtype(AutocastCategory category, const Tensor& t);

// `t` cast per the category (t itself when nothing changes; undefined stays undefined).
Tensor autocast_one(AutocastCategory category, const Tensor& t);

// The inputs of one op, each cast per the category.
template <size_t N>
std::array<Tensor, N> autocast(AutocastCategory category, const Tensor (&inputs)[N]) {
  std::array<Tensor, N> out;
  for (size_t i = 0; i < N; ++i) out[i] = autocast_one(category, inputs[i]);
  return out;
}

}  // namespace nabla::ops
