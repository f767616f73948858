// Internal. CUDA kernel entry points for reductions and softmax, in plain C++ so front ends
// compile without nvcc. Same contracts as ops/cpu/reduce_kernels.h (the front end validates,
// picks the output dtype and allocates; these only compute), with one difference: float32
// accumulates in float here, not in double as on the CPU (float16/bfloat16 accumulate in float
// on both). Kernels run on the current stream of the input's device and never synchronize.
#pragma once

#include "nabla/core/tensor.h"
#include "nabla/ops/cpu/reduce_kernels.h"

namespace nabla::ops::cuda {

using ReduceOp = cpu::ReduceOp;
using ReduceParams = cpu::ReduceParams;

// Reduces x over `dims` (wrapped, sorted, unique) into `out` (the keepdim shape, any strides).
// An empty reduction writes the op's identity (0, or NaN for Mean and Var).
void reduce(ReduceOp op, const Tensor& x, const Shape& dims, const Tensor& out, ReduceParams params = {});

// Max or Min over at most one dim, writing values and int64 indices (first occurrence on ties,
// the first NaN wins). Needs a non-empty reduced dim.
void reduce_with_index(ReduceOp op, const Tensor& x, const Shape& dims, const Tensor& values,
                       const Tensor& indices);

// out = softmax(x) (or log_softmax) along `dim`; out has x's shape and dtype and any strides.
void softmax(const Tensor& x, int64_t dim, const Tensor& out, bool log);

}  // namespace nabla::ops::cuda
