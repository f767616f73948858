// Public header. Reductions over dims, with keepdim.
//
//   auto m = x.mean({0, 2, 3}, /*keepdim=*/true);   // (N, C, H, W) -> (1, C, 1, 1)
//   auto [values, indices] = nabla::max(x, 1);     // (N, K) -> (N), (N)
//
// An empty `dims` list reduces over every dim. Float16/bfloat16 accumulate in float32; float32
// accumulates in float64 on the CPU and in float32 on CUDA (as PyTorch does on both), so CUDA
// float32 results may differ from the CPU's in the last bits. Integer sums accumulate in int64
// and return int64 (as in PyTorch).
#pragma once

#include <optional>
#include <utility>

#include "nabla/core/tensor.h"

namespace nabla {

Tensor sum(const Tensor& x, const Shape& dims = {}, bool keepdim = false);
Tensor mean(const Tensor& x, const Shape& dims = {}, bool keepdim = false);
// Variance with Bessel's correction by default (correction = 1), as torch.var.
Tensor var(const Tensor& x, const Shape& dims = {}, int64_t correction = 1, bool keepdim = false);
// The p-norm over dims (p = 2 by default; p = inf is the max of |x|).
Tensor norm(const Tensor& x, double p = 2.0, const Shape& dims = {}, bool keepdim = false);

// Maximum / minimum of all elements.
Tensor max(const Tensor& x);
Tensor min(const Tensor& x);
// Along one dim: values and int64 indices (the first occurrence on ties).
std::pair<Tensor, Tensor> max(const Tensor& x, int64_t dim, bool keepdim = false);
std::pair<Tensor, Tensor> min(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor argmax(const Tensor& x, std::optional<int64_t> dim = std::nullopt, bool keepdim = false);
Tensor argmin(const Tensor& x, std::optional<int64_t> dim = std::nullopt, bool keepdim = false);

// The running sum along dim: out[..., i, ...] = x[..., 0, ...] + ... + x[..., i, ...]. Floating x
// keeps its dtype (16-bit types add in float32); integer and bool x give int64, as in PyTorch.
Tensor cumsum(const Tensor& x, int64_t dim);

// Sums a broadcast gradient back to `sizes` (the inverse of expand); returns x itself when the
// shapes already match. Used by every broadcasting op's backward.
Tensor sum_to(const Tensor& x, const Shape& sizes);

}  // namespace nabla
