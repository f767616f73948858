// Internal. CPU kernels for reductions and softmax. Front ends (ops/reduce.cpp, ops/softmax.cpp)
// validate, pick the output dtype and allocate; these only compute.
//
// Every kernel sees its input as a dense (outer, R, inner) block in memory order: R spans the
// reduced dims, outer and inner the kept dims before and after them. A dense input of any
// layout (contiguous, transposed, channels_last) that has its reduced dims next to each other in
// memory is read in place; anything else is first copied into (kept..., reduced...) order.
// See Note [Reduction layout] in reduce.cpp.
#pragma once

#include <cstdint>

#include "nabla/core/tensor.h"

namespace nabla::ops::cpu {

enum class ReduceOp : uint8_t {
  Sum,   // integers and bool accumulate and write int64
  Mean,  // sum / R
  Var,   // sum((x - mean)^2) / max(0, R - correction)
  Norm,  // (sum |x|^p)^(1/p); p = 0 counts non-zeros, p = +-inf is the max/min of |x|
  Max,   // NaN is the maximum
  Min,   // NaN is the minimum
};

struct ReduceParams {
  double p = 2.0;          // Norm
  int64_t correction = 1;  // Var
};

// Reduces x over `dims` (wrapped, sorted, unique; may be empty) into `out`, which has x's rank
// with size 1 at each reduced dim (the keepdim shape) and any strides. An empty reduction
// writes the op's identity (0 for Sum and Norm, NaN for Mean and Var); Max and Min need R > 0.
void reduce(ReduceOp op, const Tensor& x, const Shape& dims, const Tensor& out, ReduceParams params = {});

// Max or Min over `dims` (at most one dim, so that the index is that dim's coordinate) writing
// values and int64 indices, both of the keepdim shape. Ties give the first occurrence; the first
// NaN wins over everything. Needs R > 0.
void reduce_with_index(ReduceOp op, const Tensor& x, const Shape& dims, const Tensor& values,
                       const Tensor& indices);

// out = softmax(x) (or log_softmax when `log`) along `dim`; out has x's shape and dtype and any
// strides. Float16/bfloat16 compute in float32.
void softmax(const Tensor& x, int64_t dim, const Tensor& out, bool log);

}  // namespace nabla::ops::cpu
