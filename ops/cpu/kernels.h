// Internal. CPU kernel entry points. Front ends validate, allocate the output and pick the
// dtype; kernels only compute. Outputs may have any strides; inputs broadcast to the output.
#pragma once

#include "nabla/core/generator.h"
#include "nabla/core/tensor.h"
#include "nabla/ops/detail/op_kinds.h"

namespace nabla::ops::cpu {

void fill(const Tensor& out, double value);
// dst = src with dtype conversion; src broadcasts to dst's shape.
void copy(const Tensor& src, const Tensor& dst);
void arange(const Tensor& out, double start, double step);
void uniform(const Tensor& out, PhiloxState state, double low, double high);
void normal(const Tensor& out, PhiloxState state, double mean, double stddev);
void randint(const Tensor& out, PhiloxState state, int64_t low, int64_t high);
// out = 1 where the element's uniform float draw is below p, else 0 (any dtype).
void bernoulli(const Tensor& out, PhiloxState state, double p);

// out = op(in); in and out share a dtype, except comparisons, whose out is bool.
void unary(UnaryOp op, const Tensor& in, const Tensor& out, UnaryParams params);
// out = op(a, b); a and b share a dtype (the front end casts), out is that dtype or bool.
void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out, double alpha);
// out = cond ? a : b; cond is bool.
void where(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out);

}  // namespace nabla::ops::cpu
