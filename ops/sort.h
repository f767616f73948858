// Public header. Sorting along a dim, and the k largest (or smallest) elements.
//
//   auto [values, indices] = nabla::sort(x, {.dim = -1, .descending = true});
//   auto [top, where] = nabla::topk(logits, 50);            // (B, V) -> (B, 50), largest first
//   auto order = nabla::argsort(x);
//
// The sort is stable (equal elements keep their order), on both backends, so the CPU and CUDA
// agree on ties. NaN sorts above every number, as in PyTorch (on CUDA, NaNs with the sign bit set
// sort below -inf; the NaNs CUDA arithmetic produces do not have it). Indices are int64. Values
// are differentiable: the gradient flows back to the positions the indices name. CUDA sorts rows
// with CUB's segmented radix sort; a tensor must have fewer than 2^31 elements there.
#pragma once

#include <cstdint>
#include <utility>

#include "nabla/core/tensor.h"

namespace nabla {

struct SortOptions {
  int64_t dim = -1;
  bool descending = false;
};
// (values, indices), both of x's shape.
std::pair<Tensor, Tensor> sort(const Tensor& x, SortOptions options = {});
Tensor argsort(const Tensor& x, SortOptions options = {});

struct TopkOptions {
  int64_t dim = -1;
  bool largest = true;  // false: the k smallest
};
// (values, indices) of the k largest (smallest) elements along dim, in sorted order; 0 <= k <= size.
std::pair<Tensor, Tensor> topk(const Tensor& x, int64_t k, TopkOptions options = {});

}  // namespace nabla
