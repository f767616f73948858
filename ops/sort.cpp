// sort, argsort and topk. The kernels (ops/cpu/sort.cpp, ops/cuda/sort/sort.cu) sort the rows of a
// contiguous (rows, n) matrix; the front end moves the sorted dim last and back. topk is a sort
// and a narrow: O(n log n) rather than a selection, which for the sizes topk serves (a sampling
// step over a vocabulary) costs microseconds.
#include "nabla/ops/sort.h"

#include "nabla/ops/autograd/function.h"
#include "nabla/ops/cpu/sort_kernels.h"
#include "nabla/ops/cuda/sort/kernels.h"
#include "nabla/ops/detail/dispatch.h"
#include "nabla/ops/factory.h"
#include "nabla/ops/indexing.h"
#include "nabla/ops/view.h"

namespace nabla {

namespace {

// The gradient of values picked from x at `indices` along dim: scattered back to their positions.
Tensor picked_backward(const Tensor& grad, const Tensor& indices, int64_t dim, const Shape& sizes) {
  return scatter_add(zeros(sizes, grad.options()), dim, indices, grad);
}

}  // namespace

std::pair<Tensor, Tensor> sort(const Tensor& x, SortOptions options) {
  ops::check_defined("sort", x, "input");
  const int64_t dim = wrap_dim(options.dim, std::max<int64_t>(x.dim(), 1), "sort");
  if (x.dim() == 0) return {x.clone(), zeros({}, {.dtype = kInt64, .device = x.device()})};
  // (rows, n) with the sorted dim last; the copy needs no history (the node below is the op's).
  const Tensor moved = [&] {
    NoGradGuard no_grad;
    return x.transpose(dim, -1).contiguous();
  }();
  const int64_t n = moved.size(-1), rows = n == 0 ? 0 : moved.numel() / n;
  Tensor values = Tensor::empty(moved.sizes(), moved.options());
  Tensor indices = Tensor::empty(moved.sizes(), {.dtype = kInt64, .device = x.device()});
  if (rows > 0 && n > 0) {
    const Tensor in2 = moved.view({rows, n}), v2 = values.view({rows, n}), i2 = indices.view({rows, n});
    ops::dispatch(
        "sort", x, [&] { ops::cpu::sort_rows(in2, options.descending, v2, i2); },
        [&] { ops::cuda::sort_rows(in2, options.descending, v2, i2); });
  }
  values = values.transpose(dim, -1);
  indices = indices.transpose(dim, -1);
  if (autograd::needs_grad({x})) {
    autograd::record("SortBackward", {x}, {values}, {indices},
                     [dim, sizes = x.sizes()](autograd::BackwardContext& c) {
                       return TensorList{picked_backward(c.grad(), c.saved[0], dim, sizes)};
                     });
  }
  return {values, indices};
}

Tensor argsort(const Tensor& x, SortOptions options) {
  NoGradGuard no_grad;
  return sort(x, options).second;
}

std::pair<Tensor, Tensor> topk(const Tensor& x, int64_t k, TopkOptions options) {
  ops::check_defined("topk", x, "input");
  const int64_t dim = wrap_dim(options.dim, std::max<int64_t>(x.dim(), 1), "topk");
  const int64_t n = x.dim() == 0 ? 1 : x.size(dim);
  NABLA_CHECK(k >= 0 && k <= n, "topk: k must be in [0, {}] (the size of dim {} of {}), got {}", n, dim,
              describe(x), k);
  auto [values, indices] = sort(x, {.dim = dim, .descending = options.largest});
  if (x.dim() == 0) return {values, indices};
  return {values.narrow(dim, 0, k), indices.narrow(dim, 0, k)};
}

}  // namespace nabla
