// layer_norm front end. The normalized trailing dims are one row of D elements, so the kernels
// (ops/cpu/norm.cpp, ops/cuda/layer_norm.cu) see a contiguous (rows, D) matrix and keep the
// per-row mean and 1 / std for the backward, which is one fused kernel per backend.
#include <cmath>

#include "nabla/ops/autograd/function.h"
#include "nabla/ops/cpu/norm_kernels.h"
#include "nabla/ops/cuda/norm_kernels.h"
#include "nabla/ops/detail/autocast_policy.h"
#include "nabla/ops/detail/dispatch.h"
#include "nabla/ops/norm.h"

namespace nabla {

using autograd::BackwardContext;

namespace {

DType stats_dtype(DType x) {
  return x == kFloat16 || x == kBFloat16 ? kFloat32 : x;
}

void check_affine(const Tensor& t, const char* name, const Tensor& x, const Shape& normalized_shape) {
  if (!t.defined()) return;
  NABLA_CHECK(t.sizes() == normalized_shape && t.dtype() == x.dtype() && t.device() == x.device(),
              "layer_norm: expected {} of shape {} with the input's dtype and device ({}), got {}", name,
              shape_str(normalized_shape), describe(x), describe(t));
}

// dx, dweight, dbias from one kernel; its result has no derivative of its own.
TensorList layer_norm_backward(const Tensor& grad, const Tensor& x, const Tensor& weight, const Tensor& mean,
                               const Tensor& rstd, const Shape& normalized_shape,
                               const std::vector<bool>& needs) {
  Tensor dx, dweight, dbias;
  {
    NoGradGuard no_grad;
    const int64_t rows = mean.numel(), D = numel_of(normalized_shape);
    const Tensor dy = grad.contiguous();
    if (needs[0]) dx = Tensor::empty(x.sizes(), x.options());
    if (needs[1]) dweight = Tensor::empty(normalized_shape, x.options());
    if (needs[2]) dbias = Tensor::empty(normalized_shape, x.options());
    auto rows_of = [&](const Tensor& t) { return t.defined() ? t.view({rows, D}) : t; };
    auto flat = [&](const Tensor& t) { return t.defined() ? t.view({D}) : t; };
    ops::dispatch(
        "layer_norm_backward", x,
        [&] {
          ops::cpu::layer_norm_backward(rows_of(dy), rows_of(x), flat(weight), mean, rstd, rows_of(dx),
                                        flat(dweight), flat(dbias));
        },
        [&] {
          ops::cuda::layer_norm_backward(rows_of(dy), rows_of(x), flat(weight), mean, rstd, rows_of(dx),
                                         flat(dweight), flat(dbias));
        });
  }
  if (autograd::needs_grad({grad, x, weight})) {
    autograd::record("layer_norm_backward", {grad, x, weight}, {dx, dweight, dbias}, {},
                     [](BackwardContext&) -> TensorList {
                       NABLA_CHECK(false,
                                   "layer_norm_backward: double backward through this op is not supported");
                       return {};
                     });
  }
  return {dx, dweight, dbias};
}

}  // namespace

Tensor layer_norm(const Tensor& x_arg, const Shape& normalized_shape, const Tensor& weight_arg,
                  const Tensor& bias_arg, LayerNormOptions options) {
  const double eps = options.eps;
  // Autocast: float32 (statistics and output).
  const auto [x_in, weight_in, bias_in] =
      ops::autocast(ops::AutocastCategory::Float32, {x_arg, weight_arg, bias_arg});
  ops::check_defined("layer_norm", x_in, "input");
  NABLA_CHECK(x_in.is_floating_point(), "layer_norm: expected a floating-point input, got {}",
              describe(x_in));
  const int64_t k = static_cast<int64_t>(normalized_shape.size());
  NABLA_CHECK(k > 0, "layer_norm: normalized_shape must name at least one trailing dim, got []");
  bool matches = x_in.dim() >= k;
  for (int64_t i = 0; matches && i < k; ++i) matches = x_in.size(x_in.dim() - k + i) == normalized_shape[i];
  NABLA_CHECK(matches, "layer_norm: normalized_shape {} must match the last dims of the input {}",
              shape_str(normalized_shape), describe(x_in));
  NABLA_CHECK(eps > 0 && std::isfinite(eps), "layer_norm: expected eps > 0, got {}", eps);
  check_affine(weight_in, "weight", x_in, normalized_shape);
  check_affine(bias_in, "bias", x_in, normalized_shape);

  const Tensor x = x_in.contiguous();
  const Tensor weight = weight_in.defined() ? weight_in.contiguous() : weight_in;
  const Tensor bias = bias_in.defined() ? bias_in.contiguous() : bias_in;
  const int64_t D = numel_of(normalized_shape);
  int64_t rows = 1;
  for (int64_t d = 0; d < x.dim() - k; ++d) rows *= x.size(d);
  Tensor y = Tensor::empty(x.sizes(), x.options());
  const TensorOptions stats_options{.dtype = stats_dtype(x.dtype()), .device = x.device()};
  Tensor mean = Tensor::empty({rows}, stats_options), rstd = Tensor::empty({rows}, stats_options);
  if (rows > 0 && D > 0) {
    const Tensor x2 = x.view({rows, D}), y2 = y.view({rows, D});
    const Tensor w = weight.defined() ? weight.view({D}) : weight, b = bias.defined() ? bias.view({D}) : bias;
    ops::dispatch(
        "layer_norm_forward", x, [&] { ops::cpu::layer_norm_forward(x2, w, b, eps, y2, mean, rstd); },
        [&] { ops::cuda::layer_norm_forward(x2, w, b, eps, y2, mean, rstd); });
  }
  if (autograd::needs_grad({x, weight, bias})) {
    autograd::record("LayerNormBackward", {x, weight, bias}, {y}, {x, weight, mean, rstd},
                     [normalized_shape](BackwardContext& ctx) {
                       const auto& s = ctx.saved;
                       return layer_norm_backward(ctx.grad(), s[0], s[1], s[2], s[3], normalized_shape,
                                                  ctx.needs_input_grad);
                     });
  }
  return y;
}

}  // namespace nabla
