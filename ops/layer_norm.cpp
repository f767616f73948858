// layer_norm and rms_norm front end. The normalized trailing dims are one row of D elements, so
// the kernels (ops/cpu/norm.cpp, ops/cuda/norm/layer_norm.cu) see a contiguous (rows, D) matrix and
// keep the per-row mean (0 for RMS norm) and 1 / std for the backward, which is one fused kernel
// per backend. RMS norm is layer norm without the centring, so both share every kernel.
#include <cmath>
#include <limits>
#include <optional>

#include "nabla/ops/autograd/detail/no_double_backward.h"
#include "nabla/ops/autograd/function.h"
#include "nabla/ops/cpu/norm_kernels.h"
#include "nabla/ops/cuda/norm/kernels.h"
#include "nabla/ops/detail/autocast_policy.h"
#include "nabla/ops/detail/dispatch.h"
#include "nabla/ops/elementwise.h"
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
    Tensor dy = grad.contiguous();
    if (needs[0]) dx = Tensor::empty(x.sizes(), x.options());
    if (needs[1]) dweight = Tensor::empty(normalized_shape, x.options());
    if (needs[2]) dbias = Tensor::empty(normalized_shape, x.options());
    auto rows_of = [&](const Tensor& t) { return t.defined() ? t.view({rows, D}) : t; };
    auto flat = [&](const Tensor& t) { return t.defined() ? t.view({D}) : t; };
    // The gradient of a lower-precision result (the dtype option) comes in that dtype: CUDA's
    // vector kernel reads it as it is, otherwise it is converted first (the cast's backward).
    ops::dispatch(
        "layer_norm_backward", x,
        [&] {
          if (dy.dtype() != x.dtype()) dy = dy.to(x.dtype());
          ops::cpu::layer_norm_backward(rows_of(dy), rows_of(x), flat(weight), mean, rstd, rows_of(dx),
                                        flat(dweight), flat(dbias), kind);
        },
        [&] {
          if (ops::cuda::layer_norm_backward(rows_of(dy), rows_of(x), flat(weight), mean, rstd, rows_of(dx),
                                             flat(dweight), flat(dbias), kind)) {
            return;
          }
          dy = dy.to(x.dtype());
          ops::cuda::layer_norm_backward(rows_of(dy), rows_of(x), flat(weight), mean, rstd, rows_of(dx),
                                         flat(dweight), flat(dbias), kind);
        });
  }
  autograd::refuse_double_backward("layer_norm_backward", {grad, x, weight}, {dx, dweight, dbias},
                                   "layer_norm and rms_norm");
  return {dx, dweight, dbias};
}

Tensor row_norm(RowNorm kind, const Tensor& x_arg, const Shape& normalized_shape, const Tensor& weight_arg,
                const Tensor& bias_arg, double eps, std::optional<DType> out_dtype) {
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
  const DType y_dtype = out_dtype.value_or(x_in.dtype());
  NABLA_CHECK(is_floating(y_dtype), "{}: the result's dtype must be floating, got {}", op,
              dtype_name(y_dtype));

  const Tensor x = x_in.contiguous();
  const Tensor weight = weight_in.defined() ? weight_in.contiguous() : weight_in;
  const Tensor bias = bias_in.defined() ? bias_in.contiguous() : bias_in;
  const int64_t D = numel_of(normalized_shape);
  int64_t rows = 1;
  for (int64_t d = 0; d < x.dim() - k; ++d) rows *= x.size(d);
  Tensor y = Tensor::empty(x.sizes(), {.dtype = y_dtype, .device = x.device()});
  const TensorOptions stats_options{.dtype = stats_dtype(x.dtype()), .device = x.device()};
  Tensor mean = Tensor::empty({rows}, stats_options), rstd = Tensor::empty({rows}, stats_options);
  if (rows > 0 && D > 0) {
    const Tensor x2 = x.view({rows, D});
    const Tensor w = weight.defined() ? weight.view({D}) : weight, b = bias.defined() ? bias.view({D}) : bias;
    // In x's dtype, then cast: where the kernels take no other result dtype.
    const auto via_cast = [&](auto&& forward) {
      NoGradGuard no_grad;
      const Tensor full = Tensor::empty(x.sizes(), x.options());
      forward(full.view({rows, D}));
      y.copy_(full);
    };
    ops::dispatch(
        op, x,
        [&] {
          const auto forward = [&](const Tensor& out) {
            ops::cpu::layer_norm_forward(x2, w, b, eps, out, mean, rstd, kind);
          };
          if (y_dtype == x.dtype()) {
            forward(y.view({rows, D}));
          } else {
            via_cast(forward);
          }
        },
        [&] {
          const auto forward = [&](const Tensor& out) {
            return ops::cuda::layer_norm_forward(x2, w, b, eps, out, mean, rstd, kind);
          };
          if (!forward(y.view({rows, D}))) via_cast(forward);
        });
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
  return row_norm(RowNorm::Layer, x, normalized_shape, weight, bias, options.eps, options.dtype);
}

namespace {

// The fused add_layer_norm on CUDA, or an undefined result where it does not apply (the caller
// composes then). Note [Fused residual norm]: the forward saves the sum h (as layer norm saves its
// input), weight, mean and 1 / std; the backward gets dh (the gradient that reached h directly,
// zeros if none) and dz, and one kernel writes dx = dh + layer_norm_backward(dz) and dy, the same
// values in y's dtype, with the parameter gradients.
// add_layer_norm's backward: dx = dh + the norm's input gradient from dz, dy the same in y's
// dtype, and the parameter gradients. One kernel where the vector kernels take the rows (the
// forward's may take longer rows than the backward's, and an incoming gradient may be
// misaligned); otherwise the norm's own backward, then the add and the cast.
TensorList add_layer_norm_backward(BackwardContext& ctx, const Shape& normalized_shape, DType y_dtype,
                                   int64_t rows, int64_t D) {
  NABLA_CHECK(!GradMode::is_enabled(), "add_layer_norm: double backward is not supported");
  const auto& s = ctx.saved;
  const Tensor &sum = s[0], &weight = s[1];
  const Tensor dh = ctx.grads[0].contiguous(), dz = ctx.grads[1].contiguous();
  const auto& needs = ctx.needs_input_grad;
  Tensor dx = Tensor::empty(sum.sizes(), sum.options());
  Tensor dy = needs[1] && y_dtype != kFloat32
                  ? Tensor::empty(sum.sizes(), {.dtype = y_dtype, .device = sum.device()})
                  : Tensor();
  Tensor dweight = needs[2] ? Tensor::empty(weight.sizes(), weight.options()) : Tensor();
  Tensor dbias = needs[3] ? Tensor::empty(normalized_shape, sum.options()) : Tensor();
  auto rows_of = [&](const Tensor& t) { return t.defined() ? t.view({rows, D}) : t; };
  auto flat = [&](const Tensor& t) { return t.defined() ? t.view({D}) : t; };
  ops::dispatch(
      "add_layer_norm_backward", sum, [] { NABLA_ASSERT(false, "add_layer_norm's fused path is CUDA only"); },
      [&] {
        if (ops::cuda::layer_norm_backward(rows_of(dz), rows_of(sum), flat(weight), s[2], s[3], rows_of(dx),
                                           flat(dweight), flat(dbias), RowNorm::Layer, rows_of(dh),
                                           rows_of(dy))) {
          return;
        }
        const Tensor dz32 = dz.to(kFloat32).contiguous();  // same-dtype calls always run
        ops::cuda::layer_norm_backward(rows_of(dz32), rows_of(sum), flat(weight), s[2], s[3], rows_of(dx),
                                       flat(dweight), flat(dbias), RowNorm::Layer);
        dx.add_(dh);
        if (dy.defined()) dy.copy_(dx);
      });
  if (needs[1] && !dy.defined()) dy = dx;  // float32 y: the same gradient, as AddBackward gives
  return {needs[0] ? dx : Tensor(), needs[1] ? dy : Tensor(), dweight, dbias};
}

std::optional<AddNorm> fused_add_layer_norm(const Tensor& x, const Tensor& y, const Shape& normalized_shape,
                                            const Tensor& weight, const Tensor& bias, double eps,
                                            DType z_dtype) {
  if (!x.is_cuda() || x.dtype() != kFloat32 || y.sizes() != x.sizes() || y.device() != x.device() ||
      !x.is_contiguous() || !y.is_contiguous() || !is_floating(y.dtype()) || y.dtype() == kFloat64) {
    return std::nullopt;
  }
  for (const Tensor* p : {&weight, &bias}) {
    if (p->defined() && (p->dtype() != kFloat32 || !p->is_contiguous() || p->device() != x.device())) {
      return std::nullopt;  // the composition names what is wrong
    }
  }
  const int64_t k = static_cast<int64_t>(normalized_shape.size());
  if (k == 0 || x.dim() < k) return std::nullopt;
  for (int64_t i = 0; i < k; ++i) {
    if (x.size(x.dim() - k + i) != normalized_shape[i]) return std::nullopt;
  }
  for (const Tensor* p : {&weight, &bias}) {
    if (p->defined() && p->sizes() != normalized_shape) return std::nullopt;
  }
  const int64_t D = numel_of(normalized_shape), rows = D > 0 ? x.numel() / D : 0;
  if (rows == 0 || D == 0) return std::nullopt;
  Tensor h = Tensor::empty(x.sizes(), x.options());
  Tensor z = Tensor::empty(x.sizes(), {.dtype = z_dtype, .device = x.device()});
  const TensorOptions stats_options{.dtype = kFloat32, .device = x.device()};
  Tensor mean = Tensor::empty({rows}, stats_options), rstd = Tensor::empty({rows}, stats_options);
  const Tensor w = weight.defined() ? weight.view({D}) : weight, b = bias.defined() ? bias.view({D}) : bias;
  const bool ran = ops::dispatch(
      "add_layer_norm", x, [] { return false; },
      [&] {
        return ops::cuda::layer_norm_forward(x.view({rows, D}), w, b, eps, z.view({rows, D}), mean, rstd,
                                             RowNorm::Layer, y.view({rows, D}), h.view({rows, D}));
      });
  if (!ran) return std::nullopt;
  if (autograd::needs_grad({x, y, weight, bias})) {
    autograd::record("AddLayerNormBackward", {x, y, weight, bias}, {h, z}, {h, weight, mean, rstd},
                     [normalized_shape, y_dtype = y.dtype(), rows, D](BackwardContext& ctx) {
                       return add_layer_norm_backward(ctx, normalized_shape, y_dtype, rows, D);
                     });
  }
  return AddNorm{h, z};
}

}  // namespace

AddNorm add_layer_norm(const Tensor& x, const Tensor& y, const Shape& normalized_shape, const Tensor& weight,
                       const Tensor& bias, LayerNormOptions options) {
  ops::check_defined("add_layer_norm", x, "x");
  ops::check_defined("add_layer_norm", y, "y");
  NABLA_CHECK(options.eps > 0 && std::isfinite(options.eps), "add_layer_norm: expected eps > 0, got {}",
              options.eps);
  // The fused kernel takes a float32 x, so the sum and (by default) the norm are float32, as the
  // composition gives with or without autocast; autocast's float32 cast of weight and bias too.
  const auto [weight_in, bias_in] = ops::autocast(ops::AutocastCategory::Float32, {weight, bias});
  const DType z_dtype = options.dtype.value_or(kFloat32);
  if (is_floating(z_dtype)) {
    if (auto fused = fused_add_layer_norm(x, y, normalized_shape, weight_in, bias_in, options.eps, z_dtype)) {
      return *fused;
    }
  }
  Tensor h = x + y;
  return {h, layer_norm(h, normalized_shape, weight, bias, options)};
}

Tensor rms_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight,
                RMSNormOptions options) {
  // PyTorch's default eps is the machine epsilon of the type the math runs in: float64's for
  // float64, float32's otherwise (16-bit inputs compute in float32).
  const double machine_eps = x.defined() && x.dtype() == kFloat64 ? std::numeric_limits<double>::epsilon()
                                                                  : std::numeric_limits<float>::epsilon();
  return row_norm(RowNorm::Rms, x, normalized_shape, weight, {}, options.eps.value_or(machine_eps),
                  options.dtype);
}

}  // namespace nabla
