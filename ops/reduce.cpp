// Reduction front ends: sum, mean, var, norm, max/min (of everything, or along a dim with
// indices), argmax/argmin and sum_to. Each validates, allocates its output, runs the backend
// kernel (ops/cpu/reduce.cpp, or ops/cuda/reduce_*.cu) and records a backward written with differentiable
// ops, so that create_graph works. Outputs are contiguous; the kernel writes them through a keepdim-shaped
// alias, and keepdim=false simply drops those size-1 dims.
#include "nabla/ops/reduce.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "nabla/ops/autograd/function.h"
#include "nabla/ops/cpu/reduce_kernels.h"
#include "nabla/ops/cuda/reduce/kernels.h"
#include "nabla/ops/detail/alias.h"
#include "nabla/ops/detail/autocast_policy.h"
#include "nabla/ops/detail/dispatch.h"
#include "nabla/ops/elementwise.h"
#include "nabla/ops/factory.h"
#include "nabla/ops/fusion/recorder.h"
#include "nabla/ops/view.h"

namespace nabla {

using autograd::BackwardContext;
using ops::cpu::ReduceOp;
using ops::cpu::ReduceParams;

namespace {

// The dims a reduction runs over: wrapped, sorted and unique. An empty list means every dim. A
// 0-d tensor accepts dim 0 or -1, as in PyTorch, and has nothing to reduce.
Shape reduction_dims(const Tensor& x, const Shape& dims, const char* op) {
  Shape out;
  if (dims.empty()) {
    for (int64_t d = 0; d < x.dim(); ++d) out.push_back(d);
    return out;
  }
  for (int64_t d : dims) {
    const int64_t w = wrap_dim(d, x.dim(), op);
    NABLA_CHECK(std::find(out.begin(), out.end(), w) == out.end(),
                "{}: dim {} appears more than once in the dims list {} (for {})", op, w, shape_str(dims),
                describe(x));
    out.push_back(w);
  }
  if (x.dim() == 0) return {};
  std::sort(out.begin(), out.end());
  return out;
}

int64_t reduced_numel(const Tensor& x, const Shape& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= x.size(d);
  return n;
}

void check_floating(const Tensor& x, const char* op) {
  ops::check_defined(op, x, "self");
  NABLA_CHECK(x.is_floating_point(),
              "{}: expected a floating-point tensor, got {}; convert it first, e.g. x.to(nabla::kFloat32)",
              op, describe(x));
}

// A fresh contiguous result (keepdim or not) and the keepdim-shaped alias the kernel writes.
struct ReductionOutput {
  Tensor result;
  Tensor keep;
};

ReductionOutput allocate_output(const Tensor& x, const Shape& dims, bool keepdim, DType dtype) {
  Shape keep = x.sizes(), dropped;
  for (int64_t d : dims) keep[d] = 1;
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (!std::binary_search(dims.begin(), dims.end(), d)) dropped.push_back(x.size(d));
  }
  Tensor result = Tensor::empty(keepdim ? keep : dropped, {.dtype = dtype, .device = x.device()});
  // Size-1 dims take any stride, so the keepdim shape's contiguous strides address the same memory.
  return {result, keepdim ? result : ops::alias(result, keep, contiguous_strides(keep), 0)};
}

Tensor run_reduce(ReduceOp op, const Tensor& x, const Shape& dims, bool keepdim, DType dtype,
                  ReduceParams params = {}) {
  ReductionOutput out = allocate_output(x, dims, keepdim, dtype);
  if (out.keep.numel() == 0) return out.result;
  if (x.numel() == 0) {
    // PyTorch's results over no elements: 0 for sums and norms, NaN for mean and var (max and
    // min of nothing are refused before this).
    NABLA_ASSERT(op != ReduceOp::Max && op != ReduceOp::Min, "max/min of no elements");
    const bool nan = op == ReduceOp::Mean || op == ReduceOp::Var;
    out.result.fill_(nan ? std::numeric_limits<double>::quiet_NaN() : 0.0);
    return out.result;
  }
  // A compiled step records a sum or mean of a held pointwise result, to run in the kernel
  // computing it (Note [Fused reductions] in ops/fusion/plan.cpp); the rest runs now.
  nabla::dispatch_pointwise(
      "reduce", x, [&] { ops::cpu::reduce(op, x, dims, out.keep, params); },
      [&] {
        const bool sum_or_mean = op == ReduceOp::Sum || op == ReduceOp::Mean;
        if (sum_or_mean && ops::fusion::record_reduce(x, dims, op == ReduceOp::Mean, out.result)) return;
        flush_deferred();
        const nabla::detail::InsideDispatch inside;
        ops::cuda::reduce(op, x, dims, out.keep, params);
      });
  return out.result;
}

// Values and int64 indices of max/min over at most one dim; no autograd.
std::pair<Tensor, Tensor> run_with_index(ReduceOp op, const Tensor& x, const Shape& dims, bool keepdim) {
  ReductionOutput values = allocate_output(x, dims, keepdim, x.dtype());
  ReductionOutput indices = allocate_output(x, dims, keepdim, kInt64);
  if (values.keep.numel() == 0) return {values.result, indices.result};
  NABLA_ASSERT(op == ReduceOp::Max || op == ReduceOp::Min, "reduce_with_index is for max and min");
  NABLA_ASSERT(dims.size() <= 1, "an index names a position along one dim");
  ops::dispatch(
      "reduce_with_index", x, [&] { ops::cpu::reduce_with_index(op, x, dims, values.keep, indices.keep); },
      [&] { ops::cuda::reduce_with_index(op, x, dims, values.keep, indices.keep); });
  return {values.result, indices.result};
}

// Gives a reduced tensor (a gradient, or a saved result) back its reduced dims as size 1, so
// that it broadcasts against the input.
Tensor unsqueeze_dims(const Tensor& t, const Shape& dims, bool keepdim) {
  if (keepdim) return t;
  Tensor r = t;
  for (int64_t d : dims) r = r.unsqueeze(d);  // ascending, so each d is already its final position
  return r;
}

// d norm / dx, with g and n in the keepdim shape. See norm() below.
Tensor norm_backward(const Tensor& g, const Tensor& x, const Tensor& n, double p, const Shape& dims) {
  if (p == 0) return zeros_like(x);
  if (p == 1) return g * sign(x);
  if (std::isinf(p)) {
    // The max (or min) of |x|: ties share the gradient evenly.
    Tensor mask = eq(abs(x), n).to(x.dtype());
    return g * sign(x) * mask / sum(mask, dims, /*keepdim=*/true);
  }
  // A zero norm means x is all zero there; dividing by 1 instead gives a zero gradient, not NaN.
  Tensor safe = where(eq(n, 0.0), ones_like(n), n);
  if (p == 2) return g * x / safe;
  Tensor grad = g * sign(x) * pow(abs(x), p - 1) / pow(safe, p - 1);
  if (p < 1) grad = where(eq(x, 0.0), zeros_like(grad), grad);  // |x|^(p-1) is inf at 0
  return grad;
}

Tensor extreme_all(const Tensor& x, bool is_max) {
  const char* name = is_max ? "max" : "min";
  ops::check_defined(name, x, "self");
  NABLA_CHECK(x.numel() > 0,
              "{}: expected a non-empty tensor, got {}; the {} of no elements is undefined (use a dim of "
              "non-zero size, "
              "or check for empty input first)",
              name, describe(x), name);
  Shape dims = reduction_dims(x, {}, name);
  Tensor out = run_reduce(is_max ? ReduceOp::Max : ReduceOp::Min, x, dims, false, x.dtype());
  if (autograd::needs_grad({x})) {
    autograd::record(name, {x}, {out}, {x, out}, [](BackwardContext& ctx) {
      const Tensor& x = ctx.saved[0];
      const Tensor& value = ctx.saved[1];
      // Ties share the gradient evenly (as in PyTorch); a NaN result came from the NaNs. Decided
      // on the device (no item()), so backward does not wait for it.
      Tensor hit = where(ne(value, value), ne(x, x), eq(x, value));
      Tensor mask = hit.to(x.dtype());
      return TensorList{mask * (ctx.grad() / sum(mask))};
    });
  }
  return out;
}

std::pair<Tensor, Tensor> extreme_dim(const Tensor& x, int64_t dim_in, bool keepdim, bool is_max) {
  const char* name = is_max ? "max" : "min";
  ops::check_defined(name, x, "self");
  const int64_t dim = wrap_dim(dim_in, x.dim(), name);
  const Shape dims = x.dim() == 0 ? Shape{} : Shape{dim};
  NABLA_CHECK(x.dim() == 0 || x.size(dim) > 0,
              "{}: cannot reduce over dim {} of {}: it has no elements, and the {} of nothing is undefined",
              name, dim, describe(x), name);
  auto [values, indices] = run_with_index(is_max ? ReduceOp::Max : ReduceOp::Min, x, dims, keepdim);
  if (autograd::needs_grad({x})) {
    autograd::record(
        name, {x}, {values, indices}, {indices}, [sizes = x.sizes(), dims, keepdim](BackwardContext& ctx) {
          Tensor g = unsqueeze_dims(ctx.grad(0), dims, keepdim);
          if (dims.empty()) return TensorList{g};
          // The gradient goes to the position the value came from: a mask of
          // arange(size) == index along the dim, broadcast over the rest.
          const int64_t dim = dims[0];
          Shape line(sizes.size(), 1);
          line[dim] = sizes[dim];
          Tensor positions =
              arange(static_cast<double>(sizes[dim]), {.dtype = kInt64, .device = g.device()}).view(line);
          Tensor hit = eq(positions, unsqueeze_dims(ctx.saved[0], dims, keepdim));
          return TensorList{where(hit, g, zeros({}, g.options()))};
        });
  }
  return {values, indices};
}

Tensor arg_extreme(const Tensor& x, std::optional<int64_t> dim, bool keepdim, bool is_max) {
  const char* name = is_max ? "argmax" : "argmin";
  const ReduceOp op = is_max ? ReduceOp::Max : ReduceOp::Min;
  ops::check_defined(name, x, "self");
  if (dim) {
    const int64_t d = wrap_dim(*dim, x.dim(), name);
    NABLA_CHECK(x.dim() == 0 || x.size(d) > 0, "{}: cannot reduce over dim {} of {}: it has no elements",
                name, d, describe(x));
    return run_with_index(op, x, x.dim() == 0 ? Shape{} : Shape{d}, keepdim).second;
  }
  // No dim: the index into the flattened tensor, so flatten in logical (row-major) order first.
  NABLA_CHECK(x.numel() > 0, "{}: expected a non-empty tensor, got {}", name, describe(x));
  Tensor flat;
  {
    NoGradGuard no_grad;
    flat = x.reshape({x.numel()});
  }
  Tensor index = run_with_index(op, flat, {0}, false).second;
  if (!keepdim) return index;
  const Shape ones_shape(x.dim(), 1);
  return ops::alias(index, ones_shape, ones_shape, 0);
}

}  // namespace

Tensor sum(const Tensor& x_in, const Shape& dims_in, bool keepdim) {
  ops::check_defined("sum", x_in, "self");
  // Autocast: float32.
  const Tensor x = ops::autocast_one(ops::AutocastCategory::Float32, x_in);
  const Shape dims = reduction_dims(x, dims_in, "sum");
  Tensor out = run_reduce(ReduceOp::Sum, x, dims, keepdim, x.is_floating_point() ? x.dtype() : kInt64);
  if (autograd::needs_grad({x})) {
    autograd::record("sum", {x}, {out}, {}, [sizes = x.sizes(), dims, keepdim](BackwardContext& ctx) {
      return TensorList{unsqueeze_dims(ctx.grad(), dims, keepdim).expand(sizes)};
    });
  }
  return out;
}

Tensor mean(const Tensor& x_in, const Shape& dims_in, bool keepdim) {
  check_floating(x_in, "mean");
  // Autocast: float32.
  const Tensor x = ops::autocast_one(ops::AutocastCategory::Float32, x_in);
  const Shape dims = reduction_dims(x, dims_in, "mean");
  Tensor out = run_reduce(ReduceOp::Mean, x, dims, keepdim, x.dtype());
  if (autograd::needs_grad({x})) {
    const double scale = 1.0 / static_cast<double>(reduced_numel(x, dims));
    autograd::record("mean", {x}, {out}, {}, [sizes = x.sizes(), dims, keepdim, scale](BackwardContext& ctx) {
      return TensorList{(unsqueeze_dims(ctx.grad(), dims, keepdim) * scale).expand(sizes)};
    });
  }
  return out;
}

Tensor var(const Tensor& x, const Shape& dims_in, int64_t correction, bool keepdim) {
  check_floating(x, "var");
  const Shape dims = reduction_dims(x, dims_in, "var");
  Tensor out = run_reduce(ReduceOp::Var, x, dims, keepdim, x.dtype(), {.correction = correction});
  if (autograd::needs_grad({x})) {
    // d var / dx = 2 (x - mean) / (N - correction); the mean's own derivative sums to zero.
    const double scale = 2.0 / static_cast<double>(reduced_numel(x, dims) - correction);
    autograd::record("var", {x}, {out}, {x}, [dims, keepdim, scale](BackwardContext& ctx) {
      const Tensor& x = ctx.saved[0];
      Tensor g = unsqueeze_dims(ctx.grad(), dims, keepdim);
      return TensorList{g * (x - mean(x, dims, /*keepdim=*/true)) * scale};
    });
  }
  return out;
}

Tensor norm(const Tensor& x, double p, const Shape& dims_in, bool keepdim) {
  check_floating(x, "norm");
  NABLA_CHECK(!std::isnan(p), "norm: p must be a number (or +-inf), got NaN");
  const Shape dims = reduction_dims(x, dims_in, "norm");
  NABLA_CHECK(!std::isinf(p) || reduced_numel(x, dims) > 0,
              "norm: the {} norm reduces over no elements in {} and has no identity value", p, describe(x));
  Tensor out = run_reduce(ReduceOp::Norm, x, dims, keepdim, x.dtype(), {.p = p});
  if (autograd::needs_grad({x})) {
    autograd::record("norm", {x}, {out}, {x, out}, [p, dims, keepdim](BackwardContext& ctx) {
      const Tensor& x = ctx.saved[0];
      // Under create_graph the norm is recomputed so that its own history takes part; a saved
      // output is detached.
      Tensor n = GradMode::is_enabled() ? norm(x, p, dims, /*keepdim=*/true)
                                        : unsqueeze_dims(ctx.saved[1], dims, keepdim);
      return TensorList{norm_backward(unsqueeze_dims(ctx.grad(), dims, keepdim), x, n, p, dims)};
    });
  }
  return out;
}

Tensor max(const Tensor& x) {
  return extreme_all(x, true);
}
Tensor min(const Tensor& x) {
  return extreme_all(x, false);
}
std::pair<Tensor, Tensor> max(const Tensor& x, int64_t dim, bool keepdim) {
  return extreme_dim(x, dim, keepdim, true);
}
std::pair<Tensor, Tensor> min(const Tensor& x, int64_t dim, bool keepdim) {
  return extreme_dim(x, dim, keepdim, false);
}
Tensor argmax(const Tensor& x, std::optional<int64_t> dim, bool keepdim) {
  return arg_extreme(x, dim, keepdim, true);
}
Tensor argmin(const Tensor& x, std::optional<int64_t> dim, bool keepdim) {
  return arg_extreme(x, dim, keepdim, false);
}

Tensor sum_to(const Tensor& x, const Shape& sizes) {
  ops::check_defined("sum_to", x, "self");
  if (x.sizes() == sizes) return x;
  const int64_t lead = x.dim() - static_cast<int64_t>(sizes.size());
  bool compatible = lead >= 0;
  Shape dims;
  for (int64_t d = 0; compatible && d < lead; ++d) dims.push_back(d);
  for (size_t i = 0; compatible && i < sizes.size(); ++i) {
    const int64_t have = x.size(lead + static_cast<int64_t>(i));
    if (sizes[i] == have) continue;
    if (sizes[i] == 1) {
      dims.push_back(lead + static_cast<int64_t>(i));
    } else {
      compatible = false;
    }
  }
  NABLA_CHECK(
      compatible,
      "sum_to: cannot sum {} to shape {}: the target must broadcast to the input's shape (each target dim "
      "equal to the input's or 1, with no more dims than the input)",
      describe(x), shape_str(sizes));
  // dims is not empty here (the shapes differ), so this never means "every dim".
  Tensor r = sum(x, dims, /*keepdim=*/true);  // (1, ..., 1, sizes...)
  return lead == 0 ? r : r.view(sizes);
}

}  // namespace nabla
