// layer_norm and rms_norm front end. The normalized trailing dims are one row of D elements, so
// the kernels (ops/cpu/norm.cpp, ops/cuda/layer_norm.cu) see a contiguous (rows, D) matrix and
// keep the per-row mean (0 for RMS norm) and 1 / std for the backward, which is one fused kernel
// per backend. RMS norm is layer norm without the centring, so both share every kernel.
#include <cmath>
#include <limits>

#include "nabla/ops/autograd/function.h"
#include "nabla/ops/cpu/norm_kernels.h"
#include "nabla/ops/cuda/norm_kernels.h"
#include "nabla/ops/detail/autocast_policy.h"
#include "nabla/ops/detail/dispatch.h"
#include "nabla/ops/norm.h"

namespace nabla {

using autograd::BackwardContext;
using ops::cpu::RowNorm;

namespace {

const char* name_of(RowNorm kind) {
  return kind == RowNorm::Layer ? "layer_norm" : "rms_norm";
}

DType stats_dtype(DType x) {
  return x == kFloat16 || x == kBFloat16 ? kFloat32 : x;
}

void check_affine(RowNorm kind, const Tensor& t, const char* name, const Tensor& x,
                  const Shape& normalized_shape) {
  if (!t.defined()) return;
  NABLA_CHECK(t.sizes() == normalized_shape && t.dtype() == x.dtype() && t.device() == x.device(),
              "{}: expected {} of shape {} with the input's dtype and device ({}), got {}", name_of(kind),
              name, shape_str(normalized_shape), describe(x), describe(t));
}

// dx, dweight, dbias from one kernel; its result has no derivative of its own.
TensorList layer_norm_backward(const Tensor& grad, const Tensor& x, const Tensor& weight, const Tensor& mean,
                               const Tensor& rstd, const Shape& normalized_shape,
                               const std::vector<bool>& needs, RowNorm kind) {
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
                                        flat(dweight), flat(dbias), kind);
        },
        [&] {
          ops::cuda::layer_norm_backward(rows_of(dy), rows_of(x), flat(weight), mean, rstd, rows_of(dx),
                                         flat(dweight), flat(dbias), kind);
        });
  }
  if (autograd::needs_grad({grad, x, weight})) {
    autograd::record("layer_norm_backward", {grad, x, weight}, {dx, dweight, dbias}, {},
                     [](BackwardContext&) -> TensorList {
                       NABLA_CHECK(false,
                                   "layer_norm_backward: double backward through layer_norm and rms_norm is "
                                   "not supported");
                       return {};
                     });
  }
  return {dx, dweight, dbias};
}

Tensor row_norm(RowNorm kind, const Tensor& x_arg, const Shape& normalized_shape, const Tensor& weight_arg,
                const Tensor& bias_arg, double eps) {
  const char* op = name_of(kind);
  // Autocast: float32 (statistics and output).
  const auto [x_in, weight_in, bias_in] =
      ops::autocast(ops::AutocastCategory::Float32, {x_arg, weight_arg, bias_arg});
  ops::check_defined(op, x_in, "input");
  NABLA_CHECK(x_in.is_floating_point(), "{}: expected a floating-point input, got {}", op, describe(x_in));
  const int64_t k = static_cast<int64_t>(normalized_shape.size());
  NABLA_CHECK(k > 0, "{}: normalized_shape must name at least one trailing dim, got []", op);
  bool matches = x_in.dim() >= k;
  for (int64_t i = 0; matches && i < k; ++i) matches = x_in.size(x_in.dim() - k + i) == normalized_shape[i];
  NABLA_CHECK(matches, "{}: normalized_shape {} must match the last dims of the input {}", op,
              shape_str(normalized_shape), describe(x_in));
  NABLA_CHECK(eps > 0 && std::isfinite(eps), "{}: expected eps > 0, got {}", op, eps);
  check_affine(kind, weight_in, "weight", x_in, normalized_shape);
  check_affine(kind, bias_in, "bias", x_in, normalized_shape);

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
        op, x, [&] { ops::cpu::layer_norm_forward(x2, w, b, eps, y2, mean, rstd, kind); },
        [&] { ops::cuda::layer_norm_forward(x2, w, b, eps, y2, mean, rstd, kind); });
  }
  if (autograd::needs_grad({x, weight, bias})) {
    autograd::record(kind == RowNorm::Layer ? "LayerNormBackward" : "RMSNormBackward", {x, weight, bias}, {y},
                     {x, weight, mean, rstd}, [normalized_shape, kind](BackwardContext& ctx) {
                       const auto& s = ctx.saved;
                       return layer_norm_backward(ctx.grad(), s[0], s[1], s[2], s[3], normalized_shape,
                                                  ctx.needs_input_grad, kind);
                     });
  }
  return y;
}

}  // namespace

Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight, const Tensor& bias,
                  LayerNormOptions options) {
  return row_norm(RowNorm::Layer, x, normalized_shape, weight, bias, options.eps);
}

Tensor rms_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight,
                RMSNormOptions options) {
  // PyTorch's default eps is the machine epsilon of the type the math runs in: float64's for
  // float64, float32's otherwise (16-bit inputs compute in float32).
  const double machine_eps = x.defined() && x.dtype() == kFloat64 ? std::numeric_limits<double>::epsilon()
                                                                  : std::numeric_limits<float>::epsilon();
  return row_norm(RowNorm::Rms, x, normalized_shape, weight, {}, options.eps.value_or(machine_eps));
}

}  // namespace nabla
