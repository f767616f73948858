// group_norm (ops/norm.h). On the CPU: layer_norm over each (sample, group), then the
// per-channel affine. On CUDA: nabla's kernels (Note [Group norm] in ops/cuda/norm/group_norm.cu), two
// passes forward and two backward, in either layout.
#include <cmath>
#include <optional>

#include "nabla/ops/autograd/detail/no_double_backward.h"
#include "nabla/ops/autograd/function.h"
#include "nabla/ops/cuda/norm/kernels.h"
#include "nabla/ops/detail/dispatch.h"
#include "nabla/ops/elementwise.h"
#include "nabla/ops/norm.h"
#include "nabla/ops/reduce.h"

namespace nabla {

namespace {

Tensor composed(const Tensor& x, int64_t groups, const Tensor& weight, const Tensor& bias, double eps) {
  const int64_t n = x.size(0), c = x.size(1);
  const MemoryFormat format = x.suggest_memory_format();
  const int64_t per_group = x.numel() / (n * groups);
  // 16-bit x: the normalized values stay float32 through the affine step and round once, to
  // x's dtype (as PyTorch returns it), whatever dtype the parameters have.
  const bool reduced = is_reduced_float(x.dtype());
  const std::optional<DType> work = reduced ? std::optional<DType>(kFloat32) : std::nullopt;
  Tensor y = layer_norm(x.reshape({n, groups, per_group}), {per_group}, {}, {}, {.eps = eps, .dtype = work})
                 .reshape(x.sizes());
  // (C) -> (1, C, 1, ...) to broadcast over the positions.
  Shape channel_shape(static_cast<size_t>(x.dim()), 1);
  channel_shape[1] = c;
  if (weight.defined()) y = y * weight.to(y.dtype()).reshape(channel_shape);
  if (bias.defined()) y = y + bias.to(y.dtype()).reshape(channel_shape);
  if (reduced) y = y.to(x.dtype());
  return y.dim() == 4 ? y.contiguous(format) : y;
}

// The kernels' path: x dense in its layout, parameters and statistics in float32 (float64 for
// float64 x), one node whose backward runs the two backward kernels.
Tensor on_kernels(const Tensor& x_in, int64_t groups, const Tensor& weight, const Tensor& bias, double eps) {
  // The body names the CUDA entry points, which a build without CUDA does not define; a
  // discarded statement does not need them (Note [One backend dispatch]), and an unoptimized
  // build would otherwise still emit this function and its backward.
  if constexpr (!ops::kHasCuda) {
    built_without_cuda("group_norm");
  } else {
    const MemoryFormat format = x_in.dim() == 4 ? x_in.suggest_memory_format() : MemoryFormat::Contiguous;
    const DType stat = x_in.dtype() == kFloat64 ? kFloat64 : kFloat32;
    Tensor x, w, b, y, mean, rstd;
    {
      NoGradGuard no_grad;
      x = x_in.contiguous(format);
      w = weight.defined() ? weight.to(stat).contiguous() : Tensor();
      b = bias.defined() ? bias.to(stat).contiguous() : Tensor();
      y = Tensor::empty(x.sizes(), {.dtype = x.dtype(), .device = x.device(), .memory_format = format});
      mean = Tensor::empty({x.size(0), groups}, {.dtype = stat, .device = x.device()});
      rstd = Tensor::empty({x.size(0), groups}, {.dtype = stat, .device = x.device()});
      ops::cuda::group_norm_forward(x, groups, w, b, eps, y, mean, rstd);
    }
    if (autograd::needs_grad({x_in, weight, bias})) {
      autograd::record("GroupNormBackward", {x_in, weight, bias}, {y}, /*save=*/{x, mean, rstd, w},
                       [groups, format, stat, weight_dtype = weight.defined() ? weight.dtype() : stat,
                        bias_dtype = bias.defined() ? bias.dtype() : stat](autograd::BackwardContext& ctx) {
                         const Tensor& x = ctx.saved[0];
                         const Tensor& grad = ctx.grad();
                         Tensor dx, dweight, dbias;
                         {
                           NoGradGuard no_grad;
                           const Tensor dy = grad.contiguous(format);
                           if (ctx.needs(0))
                             dx = Tensor::empty(
                                 x.sizes(),
                                 {.dtype = x.dtype(), .device = x.device(), .memory_format = format});
                           const TensorOptions per_channel{.dtype = stat, .device = x.device()};
                           Tensor dweight_part = Tensor::empty({x.size(0), x.size(1)}, per_channel);
                           Tensor dbias_part = Tensor::empty({x.size(0), x.size(1)}, per_channel);
                           ops::cuda::group_norm_backward(dy, x, groups, ctx.saved[3], ctx.saved[1],
                                                          ctx.saved[2], dx, dweight_part, dbias_part);
                           if (ctx.needs(1)) dweight = sum(dweight_part, {0}).to(weight_dtype);
                           if (ctx.needs(2)) dbias = sum(dbias_part, {0}).to(bias_dtype);
                         }
                         autograd::refuse_double_backward("group_norm_backward", {grad, x},
                                                          {dx, dweight, dbias}, "group_norm on CUDA");
                         return TensorList{dx, dweight, dbias};
                       });
    }
    return y;
  }
}

}  // namespace

Tensor group_norm(const Tensor& x, int64_t groups, const Tensor& weight, const Tensor& bias, double eps) {
  ops::check_defined("group_norm", x, "input");
  NABLA_CHECK(x.dim() >= 2, "group_norm: expected an input (N, C, *), got {}", describe(x));
  NABLA_CHECK(x.is_floating_point(), "group_norm: expected a floating-point input, got {}", describe(x));
  const int64_t c = x.size(1);
  NABLA_CHECK(groups > 0 && c % groups == 0,
              "group_norm: num_groups must be positive and divide the input's {} channels, got {}", c,
              groups);
  for (const Tensor* t : {&weight, &bias}) {
    NABLA_CHECK(!t->defined() || (t->dim() == 1 && t->size(0) == c),
                "group_norm: expected weight and bias of shape [{}] (one per channel), got {}", c,
                describe(*t));
  }
  NABLA_CHECK(eps > 0 && std::isfinite(eps), "group_norm: expected eps > 0, got {}", eps);
  ops::check_same_device("group_norm", {x, weight, bias});
  if (x.numel() == 0) return x.clone();
  return dispatch(
      "group_norm", x, [&] { return composed(x, groups, weight, bias, eps); },
      [&] { return on_kernels(x, groups, weight, bias, eps); });
}

}  // namespace nabla
