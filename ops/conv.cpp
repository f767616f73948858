// conv2d front end.
//
// Layouts. The activations' memory format (x.suggest_memory_format()) decides everything: the
// output, grad_input and, on CUDA, the format cuDNN runs in. On CUDA a channels_last x runs as
// NHWC tensors with an NHWC filter: the weight is brought to channels_last too (a copy of the
// small weight, none when the model's weights are already channels_last, as after PyTorch's
// model.to(memory_format=channels_last)), and grad_weight comes back in the weight's own
// layout. Activations are never transposed on CUDA, with one exception: cuDNN has no NHWC
// float64 convolutions, so float64 runs NCHW and converts (as PyTorch does). The CPU kernels are
// NCHW only, so there a channels_last input is read through a contiguous copy and the result is
// converted back, which keeps the API's promise (channels_last in, channels_last out) at the
// price of two copies.
//
// Float16/bfloat16 compute in float32 on the CPU (converted once, rounded once at the end); on
// CUDA cuDNN takes them as they are and accumulates in float32.
//
// Autograd: the backward computes grad_input and grad_weight with the backend's data- and
// filter-gradient kernels (skipping whichever is not needed) and grad_bias as a sum over
// (N, H, W). The two kernel gradients have no derivative of their own: a double backward
// through conv2d fails with a clear error.
#include "nabla/ops/conv.h"

#include <optional>

#include "nabla/core/autograd/grad_mode.h"
#include "nabla/ops/autograd/detail/no_double_backward.h"
#include "nabla/ops/autograd/engine.h"
#include "nabla/ops/autograd/function.h"
#include "nabla/ops/copy.h"
#include "nabla/ops/detail/autocast_policy.h"
#include "nabla/ops/detail/conv.h"
#include "nabla/ops/detail/dispatch.h"
#include "nabla/ops/detail/layer_checks.h"
#include "nabla/ops/elementwise.h"
#include "nabla/ops/factory.h"
#include "nabla/ops/reduce.h"
#include "nabla/ops/routes.h"

namespace nabla {

namespace {

std::string pair_str(Pair2 p) {
  return fmt::format("({}, {})", p[0], p[1]);
}

}  // namespace

Shape ops::check_conv2d(const Tensor& x, const Tensor& w, const Tensor& bias, const Conv2dOptions& o) {
  const char* op = "conv2d";
  ops::check_defined(op, x, "input");
  ops::check_defined(op, w, "weight");
  ops::check_same_device(op, {x, w, bias});
  NABLA_CHECK(x.dim() == 4, "conv2d: expected a 4-d input (N, C, H, W), got {}", describe(x));
  NABLA_CHECK(w.dim() == 4,
              "conv2d: expected a 4-d weight (out_channels, in_channels / groups, kH, kW), got {}",
              describe(w));
  NABLA_CHECK(x.is_floating_point(), "conv2d: expected a floating-point input, got {}; convert it with .to()",
              describe(x));
  NABLA_CHECK(w.dtype() == x.dtype(),
              "conv2d: input {} and weight {} must have one dtype; convert one with .to()", describe(x),
              describe(w));
  NABLA_CHECK(o.groups >= 1, "conv2d: groups must be positive, got {}", o.groups);
  for (int i = 0; i < 2; ++i) {
    NABLA_CHECK(o.stride[i] >= 1, "conv2d: stride must be positive, got {}", pair_str(o.stride));
    NABLA_CHECK(o.padding[i] >= 0, "conv2d: padding must be non-negative, got {}", pair_str(o.padding));
    NABLA_CHECK(o.dilation[i] >= 1, "conv2d: dilation must be positive, got {}", pair_str(o.dilation));
  }
  const int64_t c = x.size(1), out_channels = w.size(0), kh = w.size(2), kw = w.size(3);
  NABLA_CHECK(kh >= 1 && kw >= 1 && w.size(1) >= 1, "conv2d: weight {} has an empty kernel", describe(w));
  NABLA_CHECK(c % o.groups == 0, "conv2d: groups={} does not divide the {} channels of input {}", o.groups, c,
              describe(x));
  NABLA_CHECK(out_channels % o.groups == 0,
              "conv2d: groups={} does not divide the {} output channels of weight {}", o.groups, out_channels,
              describe(w));
  NABLA_CHECK(
      w.size(1) * o.groups == c,
      "conv2d: input {} has {} channels, but weight {} with groups={} expects {} (weight.size(1) * groups)",
      describe(x), c, describe(w), o.groups, w.size(1) * o.groups);
  if (bias.defined()) {
    NABLA_CHECK(bias.dtype() == x.dtype(), "conv2d: bias {} must have the input's dtype {}", describe(bias),
                dtype_name(x.dtype()));
    NABLA_CHECK(bias.dim() == 1 && bias.size(0) == out_channels,
                "conv2d: expected a bias of shape [{}] for weight {}, got {}", out_channels, describe(w),
                describe(bias));
  }
  Shape out{x.size(0), out_channels, 0, 0};
  for (int i = 0; i < 2; ++i) {
    const int64_t padded = x.size(2 + i) + 2 * o.padding[i];
    const int64_t kernel = o.dilation[i] * (w.size(2 + i) - 1) + 1;
    NABLA_CHECK(padded >= kernel,
                "conv2d: input {} is too small for weight {}: the padded input is {} x {} but the (dilated) "
                "kernel is {} x {}",
                describe(x), describe(w), x.size(2) + 2 * o.padding[0], x.size(3) + 2 * o.padding[1],
                o.dilation[0] * (kh - 1) + 1, o.dilation[1] * (kw - 1) + 1);
    out[2 + i] = (padded - kernel) / o.stride[i] + 1;
  }
  return out;
}

ops::ConvParams ops::conv_params(const Conv2dOptions& o) {
  return {.stride = o.stride.values,
          .padding = o.padding.values,
          .dilation = o.dilation.values,
          .groups = o.groups};
}

namespace {

using ops::check_conv2d;

Tensor empty_in(const Shape& sizes, const Tensor& like, MemoryFormat format) {
  return Tensor::empty(sizes, {.dtype = like.dtype(), .device = like.device(), .memory_format = format});
}

// The activations' layout: x's. A tensor that is NCHW and NHWC at once (one input channel, as in
// an MNIST stem) is channels_last when its strides are exactly NHWC's (contiguous(ChannelsLast)
// makes them so) or when the weight is channels_last, so a channels_last model stays NHWC from
// its first conv on.
MemoryFormat conv_format(const Tensor& x, const Tensor& w) {
  if (x.suggest_memory_format() == MemoryFormat::ChannelsLast) return MemoryFormat::ChannelsLast;
  if (!x.is_contiguous(MemoryFormat::ChannelsLast)) return MemoryFormat::Contiguous;
  const bool nhwc_strides =
      x.strides() == channels_last_strides(x.sizes()) && x.strides() != contiguous_strides(x.sizes());
  const bool nhwc_weight =
      w.suggest_memory_format() == MemoryFormat::ChannelsLast ||
      (w.is_contiguous(MemoryFormat::ChannelsLast) && w.strides() == channels_last_strides(w.sizes()) &&
       w.strides() != contiguous_strides(w.sizes()));
  return nhwc_strides || nhwc_weight ? MemoryFormat::ChannelsLast : MemoryFormat::Contiguous;
}

Tensor to_float32(const Tensor& t) {
  return t.defined() ? t.to(kFloat32) : t;
}

// Marks the layout copies a CPU convolution makes (its kernels are NCHW only) for the memory
// accounting of ops/copy.h; nothing elsewhere.
struct StagingOnCpu {
  std::optional<debug::CpuConvStagingScope> scope;
  explicit StagingOnCpu(const Tensor& t) {
    if (t.is_cpu()) scope.emplace();
  }
};

// y = conv(x, w) + bias in x's memory format. Records no history.
Tensor forward(const Tensor& x, const Tensor& w, const Tensor& bias, const ops::ConvParams& p,
               const Shape& out, const Routes& routes) {
  NoGradGuard no_grad;
  const MemoryFormat format = conv_format(x, w);
  if (x.is_cpu() && is_reduced_float(x.dtype())) {
    return forward(x.to(kFloat32), w.to(kFloat32), to_float32(bias), p, out, routes).to(x.dtype());
  }
  const Tensor b = bias.defined() ? bias.contiguous() : bias;
  const StagingOnCpu staging(x);
  return ops::on_convolution("conv2d_forward", x, [&](const ops::Convolution& conv) {
    const MemoryFormat run = conv.layout(format, x.dtype());
    Tensor y = empty_in(out, x, run);
    if (y.numel() > 0) conv.forward(x.contiguous(run), w.contiguous(run), b, y, p, routes);
    return y.contiguous(format);
  });
}

// The gradient with respect to the input (shape `x_sizes`, layout `format`). Records no history.
Tensor input_gradient(const Tensor& grad_y, const Tensor& w, const Shape& x_sizes, MemoryFormat format,
                      const ops::ConvParams& p, const Routes& routes) {
  NoGradGuard no_grad;
  if (w.is_cpu() && is_reduced_float(w.dtype())) {
    return input_gradient(grad_y.to(kFloat32), w.to(kFloat32), x_sizes, format, p, routes).to(w.dtype());
  }
  const StagingOnCpu staging(w);
  return ops::on_convolution("conv2d_backward_input", w, [&](const ops::Convolution& conv) {
    const MemoryFormat run = conv.layout(format, w.dtype());
    Tensor gx = empty_in(x_sizes, w, run);
    if (gx.numel() > 0) conv.backward_input(grad_y.contiguous(run), w.contiguous(run), gx, p, routes);
    return gx.contiguous(format);
  });
}

// The input gradient plus `pending`, the gradient other nodes already sent to x (the engine's
// take_pending_gradient; undefined: none). Where the backend can sum into pending as it computes
// (a convolution run as a GEMM: Note [Pointwise convolutions as GEMMs]) and pending is a buffer of
// the gradient's own layout that nothing else holds, the product accumulates into it: the residual
// block's two gradients of its input, summed without a pass of their own. Otherwise the two are
// added.
Tensor input_gradient_plus(const Tensor& grad_y, const Tensor& w, const Shape& x_sizes, MemoryFormat format,
                           const ops::ConvParams& p, const Tensor& pending, const Routes& routes) {
  if (!pending.defined()) return input_gradient(grad_y, w, x_sizes, format, p, routes);
  const ops::Convolution& backend = ops::convolution_of(w.device());
  const MemoryFormat run = backend.layout(format, w.dtype());
  if (backend.backward_input_accumulate && pending.device() == w.device() && pending.sizes() == x_sizes &&
      pending.dtype() == w.dtype() && pending.is_contiguous(run) && pending.impl_ptr().use_count() == 1 &&
      pending.storage().use_count() == 1) {
    NoGradGuard no_grad;
    const bool accumulated =
        ops::on_convolution("conv2d_backward_input", w, [&](const ops::Convolution& conv) {
          return conv.backward_input_accumulate(grad_y.contiguous(run), w.contiguous(run), pending, p,
                                                routes);
        });
    if (accumulated) return pending.contiguous(format);
  }
  return input_gradient(grad_y, w, x_sizes, format, p, routes) + pending;
}

// The gradient with respect to the weight, in the weight's layout. Records no history.
Tensor weight_gradient(const Tensor& grad_y, const Tensor& x, const Tensor& w, const ops::ConvParams& p,
                       const Routes& routes) {
  NoGradGuard no_grad;
  if (x.is_cpu() && is_reduced_float(x.dtype())) {
    return weight_gradient(grad_y.to(kFloat32), x.to(kFloat32), w, p, routes).to(w.dtype());
  }
  const MemoryFormat w_format = w.suggest_memory_format();
  if (x.size(0) == 0)
    return zeros(w.sizes(), {.dtype = x.dtype(), .device = x.device(), .memory_format = w_format});
  const StagingOnCpu staging(x);
  return ops::on_convolution("conv2d_backward_weight", x, [&](const ops::Convolution& conv) {
    const MemoryFormat run = conv.layout(conv_format(x, w), x.dtype());
    Tensor gw = empty_in(w.sizes(), x, run);
    conv.backward_weight(grad_y.contiguous(run), x.contiguous(run), gw, p, routes);
    return gw.contiguous(w_format);
  });
}

}  // namespace

void ops::record_conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& y,
                        const ConvParams& p, const Routes& routes) {
  if (!autograd::needs_grad({x, weight, bias})) return;
  autograd::record("conv2d", {x, weight, bias}, {y}, /*save=*/{x, weight},
                   [p, routes](autograd::BackwardContext& ctx) {
                     const Tensor& g = ctx.grad();  // (N, O, Ho, Wo)
                     const Tensor& x = ctx.saved[0];
                     const Tensor& w = ctx.saved[1];
                     Tensor grad_x, grad_w, grad_b;
                     if (ctx.needs(0)) {
                       grad_x = input_gradient_plus(g, w, x.sizes(), conv_format(x, w), p,
                                                    autograd::take_pending_gradient(0), routes);
                       autograd::refuse_double_backward("conv2d_backward_input", {g, w}, {grad_x}, "conv2d");
                     }
                     if (ctx.needs(1)) {
                       grad_w = weight_gradient(g, x, w, p, routes);
                       autograd::refuse_double_backward("conv2d_backward_weight", {g, x}, {grad_w}, "conv2d");
                     }
                     if (ctx.needs(2)) grad_b = sum(g, {0, 2, 3});
                     return TensorList{grad_x, grad_w, grad_b};
                   });
}

Tensor conv2d(const Tensor& x_in, const Tensor& weight_in, const Tensor& bias_in, Conv2dOptions options) {
  // Autocast: lower precision (before the checks, which need one dtype).
  const auto [x, weight, bias] =
      ops::autocast(ops::AutocastCategory::LowerPrecision, {x_in, weight_in, bias_in});
  const Shape out = check_conv2d(x, weight, bias, options);
  const ops::ConvParams p = ops::conv_params(options);
  const Routes r = routes();
  Tensor y = forward(x, weight, bias, p, out, r);
  ops::record_conv2d(x, weight, bias, y, p, r);
  return y;
}

Tensor conv_transpose2d(const Tensor& x_in, const Tensor& weight_in, const Tensor& bias_in,
                        ConvTranspose2dOptions o) {
  const char* op = "conv_transpose2d";
  ops::check_defined(op, x_in, "input");
  ops::check_defined(op, weight_in, "weight");
  const auto [x, w, bias] = ops::autocast(ops::AutocastCategory::LowerPrecision, {x_in, weight_in, bias_in});
  ops::check_same_device(op, {x, w, bias});
  NABLA_CHECK(x.dim() == 4, "conv_transpose2d: expected a 4-d input (N, C, H, W), got {}", describe(x));
  NABLA_CHECK(w.dim() == 4,
              "conv_transpose2d: expected a 4-d weight (in_channels, out_channels / groups, kH, kW), got {}",
              describe(w));
  NABLA_CHECK(x.is_floating_point() && w.dtype() == x.dtype(),
              "conv_transpose2d: expected a floating-point input and a weight of its dtype, got {} and {}",
              describe(x), describe(w));
  NABLA_CHECK(o.groups >= 1 && x.size(1) % o.groups == 0,
              "conv_transpose2d: groups must be positive and divide the input's {} channels, got {}",
              x.size(1), o.groups);
  NABLA_CHECK(w.size(0) == x.size(1),
              "conv_transpose2d: input {} has {} channels, but weight {} expects {} (weight.size(0))",
              describe(x), x.size(1), describe(w), w.size(0));
  const int64_t out_channels = w.size(1) * o.groups;
  Shape out{x.size(0), out_channels, 0, 0};
  for (int i = 0; i < 2; ++i) {
    NABLA_CHECK(
        o.stride[i] >= 1 && o.dilation[i] >= 1 && o.padding[i] >= 0 && o.output_padding[i] >= 0,
        "conv_transpose2d: expected stride >= 1, dilation >= 1, padding >= 0 and output_padding >= 0, "
        "got {}, {}, {} and {}",
        pair_str(o.stride), pair_str(o.dilation), pair_str(o.padding), pair_str(o.output_padding));
    // PyTorch also takes output_padding < dilation; then the output has rows the convolution
    // this one transposes never reads, which the kernels here cannot size.
    NABLA_CHECK(o.output_padding[i] < o.stride[i],
                "conv_transpose2d: output_padding {} must be smaller than stride {} (nabla does not take "
                "output_padding >= stride even below the dilation {})",
                pair_str(o.output_padding), pair_str(o.stride), pair_str(o.dilation));
    out[2 + i] = (x.size(2 + i) - 1) * o.stride[i] - 2 * o.padding[i] + o.dilation[i] * (w.size(2 + i) - 1) +
                 o.output_padding[i] + 1;
    NABLA_CHECK(out[2 + i] > 0, "conv_transpose2d: input {} with weight {} gives an empty output {}",
                describe(x), describe(w), shape_str(out));
  }
  if (bias.defined()) {
    NABLA_CHECK(bias.dim() == 1 && bias.size(0) == out_channels && bias.dtype() == x.dtype(),
                "conv_transpose2d: expected a bias of shape [{}] and the input's dtype, got {}", out_channels,
                describe(bias));
  }
  // The convolution this one transposes maps out -> x with the same weight and parameters.
  const ops::ConvParams p = ops::conv_params(
      {.stride = o.stride, .padding = o.padding, .dilation = o.dilation, .groups = o.groups});
  const MemoryFormat format = conv_format(x, w);
  const Routes r = routes();
  Tensor y = input_gradient(x, w, out, format, p, r);
  if (bias.defined()) {
    NoGradGuard no_grad;
    y = add(y, bias.reshape({1, out_channels, 1, 1}));
  }
  if (autograd::needs_grad({x, w, bias})) {
    autograd::record(op, {x, w, bias}, {y}, /*save=*/{x, w}, [p, format, r](autograd::BackwardContext& ctx) {
      const Tensor& g = ctx.grad();  // (N, out, Ho, Wo): the transposed convolution's input
      const Tensor& x = ctx.saved[0];
      const Tensor& w = ctx.saved[1];
      Tensor grad_x, grad_w, grad_b;
      if (ctx.needs(0)) {
        grad_x = forward(g.contiguous(format), w, {}, p, x.sizes(), r);
        autograd::refuse_double_backward("conv_transpose2d_backward_input", {g, w}, {grad_x}, "conv2d");
      }
      if (ctx.needs(1)) {
        grad_w = weight_gradient(x, g.contiguous(format), w, p, r);
        autograd::refuse_double_backward("conv_transpose2d_backward_weight", {g, x}, {grad_w}, "conv2d");
      }
      if (ctx.needs(2)) grad_b = sum(g, {0, 2, 3});
      return TensorList{grad_x, grad_w, grad_b};
    });
  }
  return y;
}

Tensor conv1d(const Tensor& x, const Tensor& weight, const Tensor& bias, Conv1dOptions options) {
  ops::check_defined("conv1d", x, "input");
  ops::check_defined("conv1d", weight, "weight");
  NABLA_CHECK(x.dim() == 2 || x.dim() == 3, "conv1d: expected an input (N, C, L) or unbatched (C, L), got {}",
              describe(x));
  NABLA_CHECK(weight.dim() == 3, "conv1d: expected a weight (out, in / groups, kernel), got {}",
              describe(weight));
  NABLA_CHECK(options.stride > 0 && options.dilation > 0 && options.padding >= 0,
              "conv1d: expected stride > 0, dilation > 0 and padding >= 0, got {}, {} and {}", options.stride,
              options.dilation, options.padding);
  const bool batched = x.dim() == 3;
  // (N, C, L) -> (N, C, 1, L): conv2d's checks then name any other mismatch (channels, groups).
  const Tensor x4 = (batched ? x : x.unsqueeze(0)).unsqueeze(2);
  const Tensor y = conv2d(x4, weight.unsqueeze(2), bias,
                          {.stride = {1, options.stride},
                           .padding = {0, options.padding},
                           .dilation = {1, options.dilation},
                           .groups = options.groups})
                       .squeeze(2);
  return batched ? y : y.squeeze(0);
}

Tensor conv2d_relu(const Tensor& x_in, const Tensor& weight_in, const Tensor& bias_in,
                   const ConvReluOptions& epilogue, Conv2dOptions options) {
  const Tensor& residual_in = epilogue.residual;
  const auto composed = [&] {
    Tensor y = conv2d(x_in, weight_in, bias_in, options);
    if (residual_in.defined()) y = add(y, residual_in);
    return relu(y);
  };
  if (!x_in.defined() || !x_in.is_cuda() || !bias_in.defined() ||
      autograd::needs_grad({x_in, weight_in, bias_in, residual_in}))
    return composed();
  // Named, not a structured binding: the lambda below captures them (clang before 16 cannot).
  const auto cast =
      ops::autocast(ops::AutocastCategory::LowerPrecision, {x_in, weight_in, bias_in, residual_in});
  const Tensor &x = cast[0], &weight = cast[1], &bias = cast[2], &residual = cast[3];
  const Shape out = check_conv2d(x, weight, bias, options);
  if (x.dtype() == kFloat64 ||
      (residual.defined() && (residual.sizes() != out || residual.dtype() != x.dtype())))
    return composed();
  NoGradGuard no_grad;
  const MemoryFormat format = conv_format(x, weight);
  Tensor y = empty_in(out, x, format);
  if (y.numel() == 0) return y;
  const Tensor r = residual.defined() ? residual.contiguous(format) : residual;
  const bool fused = ops::on_convolution("conv2d_relu", x, [&](const ops::Convolution& conv) {
    return conv.forward_relu(x.contiguous(format), weight.contiguous(format), bias.contiguous(), r, y,
                             ops::conv_params(options), routes());
  });
  return fused ? y : composed();
}

}  // namespace nabla
