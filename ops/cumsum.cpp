// cumsum front end: the kernels (ops/cpu/sort.cpp, ops/cuda/sort/sort.cu) scan the rows of a
// contiguous (rows, n) matrix, so the dim moves last and back. The gradient of a running sum is
// the running sum of the gradient from the other end, the same kernel reversed.
#include "nabla/ops/autograd/function.h"
#include "nabla/ops/cpu/sort_kernels.h"
#include "nabla/ops/cuda/sort/kernels.h"
#include "nabla/ops/detail/dispatch.h"
#include "nabla/ops/reduce.h"
#include "nabla/ops/view.h"

namespace nabla {

namespace {

Tensor scan(const Tensor& x, int64_t dim, bool reverse) {
  const Tensor moved = [&] {
    NoGradGuard no_grad;  // the node below is the op's; the copy needs no history
    return x.transpose(dim, -1).contiguous();
  }();
  const DType out_dtype = x.is_floating_point() ? x.dtype() : kInt64;
  Tensor out = Tensor::empty(moved.sizes(), {.dtype = out_dtype, .device = x.device()});
  const int64_t n = moved.size(-1), rows = n == 0 ? 0 : moved.numel() / n;
  if (rows > 0) {
    const Tensor in2 = moved.view({rows, n}), out2 = out.view({rows, n});
    ops::dispatch(
        "cumsum", x, [&] { ops::cpu::cumsum_rows(in2, reverse, out2); },
        [&] { ops::cuda::cumsum_rows(in2, reverse, out2); });
  }
  out = out.transpose(dim, -1);
  if (autograd::needs_grad({x})) {
    autograd::record(
        reverse ? "ReverseCumsumBackward" : "CumsumBackward", {x}, {out}, {},
        [dim, reverse](autograd::BackwardContext& c) { return TensorList{scan(c.grad(), dim, !reverse)}; });
  }
  return out;
}

}  // namespace

Tensor cumsum(const Tensor& x, int64_t dim) {
  ops::check_defined("cumsum", x, "input");
  if (x.dim() == 0) {
    wrap_dim(dim, 1, "cumsum");
    return scan(x.unsqueeze(0), 0, false).squeeze(0);
  }
  return scan(x, wrap_dim(dim, x.dim(), "cumsum"), /*reverse=*/false);
}

}  // namespace nabla
