// Public header. Masking by position or by a boolean mask.
//
//   auto causal = nabla::tril(nabla::ones({T, T}));             // 1 on and below the diagonal
//   auto hidden = nabla::masked_fill(scores, pad_mask, -INFINITY);
//
// tril keeps the elements of the last two dims with column - row <= diagonal and zeroes the rest;
// triu keeps column - row >= diagonal. Both work on any dtype (false for bool) and any leading
// dims, and are differentiable (the gradient is masked the same way).
#pragma once

#include <cstdint>

#include "nabla/core/tensor.h"

namespace nabla {

struct TriangleOptions {
  int64_t diagonal = 0;  // 0: the main diagonal; > 0 above it, < 0 below it
};

Tensor tril(const Tensor& x, TriangleOptions options = {});
Tensor triu(const Tensor& x, TriangleOptions options = {});

// x where mask is false, value where it is true. mask is bool and broadcasts to x's shape; the
// result has x's shape and dtype. Differentiable in x.
Tensor masked_fill(const Tensor& x, const Tensor& mask, double value);

}  // namespace nabla
