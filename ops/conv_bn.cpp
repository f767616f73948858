// conv2d_sums and batch_norm_relu_conv2d: the front ends of the fused convolution + batch norm
// path (Note [Convolution + batch norm fusion] in ops/cuda/conv/bn_fused.cpp).
//
// batch_norm_relu_conv2d's fused forward takes the batch statistics from the sums the previous
// convolution left, folds the batch norm into a per-channel float16 scale and shift (the running
// stats are updated on the way), and runs the next convolution with relu(y * scale + shift)
// applied in its load, summing its output for the next batch norm. Its node saves y, never
// relu(bn(y)). The backward runs two fused convolutions: the weight gradient recomputes the
// prologue in its load, and the data gradient masks its output with the ReLU (recomputed from y
// and the saved statistics) and reduces it for the batch norm's backward, whose input gradient
// is then one elementwise pass. Each step runs through the path's backend seam
// (ops/detail/conv_batch_norm.h); where cuDNN has no engine for a pattern, the backend
// (ops/cuda/conv/bn_path.cpp) runs its unfused equivalent, with the same values up to rounding.
#include "nabla/ops/conv_bn.h"

#include "nabla/core/autograd/grad_mode.h"
#include "nabla/ops/autograd/detail/no_double_backward.h"
#include "nabla/ops/autograd/function.h"
#include "nabla/ops/detail/autocast_policy.h"
#include "nabla/ops/detail/conv_batch_norm.h"
#include "nabla/ops/detail/dispatch.h"
#include "nabla/ops/detail/layer_checks.h"
#include "nabla/ops/elementwise.h"
#include "nabla/ops/factory.h"
#include "nabla/ops/routes.h"

namespace nabla {

bool ChannelSums::describes(const Tensor& y) const {
  return sum.defined() && y.defined() && !tensor.expired() && tensor.lock() == y.impl_ptr() &&
         y.version() == version && sum.numel() == y.size(1);
}

namespace {

constexpr MemoryFormat kChannelsLast = MemoryFormat::ChannelsLast;

bool is_channels_last(const Tensor& t) {
  return t.dim() == 4 && t.is_contiguous(kChannelsLast);
}

Tensor empty_channels_last(const Shape& sizes, const Tensor& like) {
  return Tensor::empty(sizes,
                       {.dtype = like.dtype(), .device = like.device(), .memory_format = kChannelsLast});
}

Tensor per_channel(int64_t channels, const Tensor& like, DType dtype = kFloat32) {
  return Tensor::empty({channels}, {.dtype = dtype, .device = like.device()});
}

// The activations the fused convolutions take: CUDA, channels_last float16, one group.
// bfloat16 stays out: cuDNN's statistics (GEN_STATS) are documented for float16 and float32 only,
// and a bfloat16 scale and shift would be too coarse for the prologue. So does deterministic mode
// (Routes::cudnn_deterministic): the fused engines' per-channel reductions differ in their last
// bits from run to run on an H200 (a graphed and an eager ResNet step stopped agreeing bit for
// bit), although cuDNN does not note those engines as nondeterministic.
bool fusable(const Tensor& x, const Tensor& w, const Conv2dOptions& conv, const Routes& routes) {
  return routes.conv_batch_norm_fusion && !routes.cudnn_deterministic && x.is_cuda() &&
         x.dtype() == kFloat16 && w.dtype() == x.dtype() && is_channels_last(x) && conv.groups == 1 &&
         x.numel() > 0;
}

// dy, dgamma, dbeta, dw for z = conv(relu(bn(y)), w), from the backend.
TensorList fused_backward(const Tensor& grad, const ops::BnReluConvSaved& s, const ops::ConvParams& p,
                          const Routes& routes, const std::vector<bool>& needs) {
  ops::BnReluConvGrads g;
  {
    NoGradGuard no_grad;
    const Tensor dz = grad.contiguous(kChannelsLast);
    g = ops::on_conv_batch_norm("batch_norm_relu_conv2d_backward", dz, [&](const ops::ConvBatchNorm& path) {
      return path.bn_relu_conv_backward(dz, s, needs, p, routes);
    });
  }
  TensorList grads{g.dy, g.dgamma, g.dbeta, g.dw};
  autograd::refuse_double_backward("batch_norm_relu_conv2d_backward", {grad, s.y, s.w, s.gamma, s.beta},
                                   grads);
  return grads;
}

}  // namespace

Tensor conv2d_sums(const Tensor& x_in, const Tensor& weight_in, Conv2dOptions options, ChannelSums* sums) {
  NABLA_CHECK(sums != nullptr, "conv2d_sums: sums must not be null");
  *sums = {};
  if (!x_in.defined() || !x_in.is_cuda()) return conv2d(x_in, weight_in, {}, options);
  // Named tensors, not a structured binding: lambdas below capture them.
  const auto cast = ops::autocast(ops::AutocastCategory::LowerPrecision, {x_in, weight_in});
  const Tensor& x = cast[0];
  const Tensor& weight = cast[1];
  const Shape out = ops::check_conv2d(x, weight, {}, options);
  const Routes r = routes();
  if (!fusable(x, weight, options, r)) return conv2d(x, weight, {}, options);
  Tensor y = empty_channels_last(out, x);
  const Tensor sum = per_channel(out[1], x), sqsum = per_channel(out[1], x);
  const ops::ConvParams p = ops::conv_params(options);
  const bool fused = ops::on_conv_batch_norm("conv2d_sums", x, [&](const ops::ConvBatchNorm& path) {
    NoGradGuard no_grad;
    return path.conv_sums(x, weight.contiguous(kChannelsLast), y, sum, sqsum, p, r);
  });
  if (!fused) return conv2d(x, weight, {}, options);
  ops::record_conv2d(x, weight, Tensor(), y, p, r);
  *sums = {.sum = sum, .sqsum = sqsum, .tensor = y.impl_ptr(), .version = y.version()};
  return y;
}

Tensor batch_norm_relu_conv2d(const Tensor& y_in, const ChannelSums& sums, const Tensor& bn_weight,
                              const Tensor& bn_bias, Tensor& running_mean, Tensor& running_var,
                              BatchNormOptions bn, const Tensor& weight_in, Conv2dOptions conv,
                              ChannelSums* out_sums) {
  if (out_sums) *out_sums = {};
  const auto composed = [&] {
    return conv2d(batch_norm_relu(y_in, bn_weight, bn_bias, running_mean, running_var, bn), weight_in, {},
                  conv);
  };
  if (!bn.training || !y_in.defined() || !y_in.is_cuda() || !sums.describes(y_in) || !bn_weight.defined() ||
      !bn_bias.defined())
    return composed();
  // Autocast: the batch norm keeps y's dtype, the convolution runs in the lower precision.
  const Tensor& y = y_in;
  const Tensor weight = ops::autocast_one(ops::AutocastCategory::LowerPrecision, weight_in);
  ops::validate_batch_norm("batch_norm_relu_conv2d", y, bn_weight, bn_bias, running_mean, running_var, bn);
  const Shape out = ops::check_conv2d(y, weight, {}, conv);
  const Routes r = routes();
  if (!fusable(y, weight, conv, r)) return composed();

  const int64_t c = y.size(1);
  const ops::ConvParams p = ops::conv_params(conv);
  const ops::BnReluConvSaved s{.y = y,
                               .gamma = bn_weight.contiguous(),
                               .beta = bn_bias.contiguous(),
                               .w = weight.contiguous(kChannelsLast),
                               .mean = per_channel(c, y),
                               .invstd = per_channel(c, y),
                               .scale = per_channel(c, y, y.dtype()),
                               .shift = per_channel(c, y, y.dtype())};
  Tensor z = empty_channels_last(out, y);
  const Tensor z_sum = per_channel(out[1], y), z_sqsum = per_channel(out[1], y);
  const bool fused =
      ops::on_conv_batch_norm("batch_norm_relu_conv2d", y, [&](const ops::ConvBatchNorm& path) {
        NoGradGuard no_grad;
        return path.bn_relu_conv_forward(sums.sum, sums.sqsum, y.numel() / c, s, running_mean, running_var,
                                         bn.momentum, bn.eps, z, z_sum, z_sqsum, out_sums != nullptr, p, r);
      });
  if (fused && out_sums)
    *out_sums = {.sum = z_sum, .sqsum = z_sqsum, .tensor = z.impl_ptr(), .version = z.version()};
  if (autograd::needs_grad({y, bn_weight, bn_bias, weight})) {
    const MemoryFormat w_format = weight.suggest_memory_format();
    autograd::record("BatchNormReluConv2dBackward", {y, bn_weight, bn_bias, weight}, {z},
                     {s.y, s.gamma, s.beta, s.w, s.mean, s.invstd, s.scale, s.shift},
                     [p, w_format, r](autograd::BackwardContext& ctx) {
                       const TensorList& v = ctx.saved;
                       const ops::BnReluConvSaved saved{v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]};
                       TensorList grads = fused_backward(ctx.grad(), saved, p, r, ctx.needs_input_grad);
                       if (grads[3].defined()) grads[3] = grads[3].contiguous(w_format);
                       return grads;
                     });
  }
  return z;
}

Tensor batch_norm_from_sums(const Tensor& y, const ChannelSums& sums, const Tensor& residual, bool relu,
                            const Tensor& weight, const Tensor& bias, Tensor& running_mean,
                            Tensor& running_var, BatchNormOptions bn) {
  NABLA_CHECK(
      relu || !residual.defined(),
      "batch_norm_from_sums: a residual is added before the ReLU (batch_norm_add_relu); pass relu = true "
      "with it, or no residual");
  const auto composed = [&] {
    if (residual.defined())
      return batch_norm_add_relu(y, residual, weight, bias, running_mean, running_var, bn);
    return relu ? batch_norm_relu(y, weight, bias, running_mean, running_var, bn)
                : batch_norm(y, weight, bias, running_mean, running_var, bn);
  };
  // y is conv2d_sums' output, already in the convolution's (autocast) dtype.
  if (!bn.training || !sums.describes(y) || y.dtype() != kFloat16 || !is_channels_last(y)) return composed();
  ops::validate_batch_norm("batch_norm_from_sums", y, weight, bias, running_mean, running_var, bn);
  if (residual.defined()) {
    NABLA_CHECK(
        residual.sizes() == y.sizes() && residual.dtype() == y.dtype() && residual.device() == y.device(),
        "batch_norm_from_sums: expected a residual of the input's shape, dtype and device ({}), got {}",
        describe(y), describe(residual));
  }
  const int64_t c = y.size(1);
  const Tensor z = residual.defined() ? residual.contiguous(kChannelsLast) : Tensor();
  const Tensor w = weight.defined() ? weight.contiguous() : ones({c}, {.device = y.device()});
  const Tensor b = bias.defined() ? bias.contiguous() : zeros({c}, {.device = y.device()});
  const ops::BatchNormStats stats{per_channel(c, y), per_channel(c, y)};
  Tensor out = empty_channels_last(y.sizes(), y);
  ops::on_conv_batch_norm("batch_norm_from_sums", y, [&](const ops::ConvBatchNorm& path) {
    NoGradGuard no_grad;
    path.bn_from_sums(sums.sum, sums.sqsum, {y, w, b, running_mean, running_var}, stats, bn.momentum, bn.eps,
                      z, relu, out);
  });
  if (running_mean.defined()) running_mean.bump_version(), running_var.bump_version();
  // The backward is the backend's default route (route 0: nabla's kernels); with a ReLU, its mask
  // reads `out` (not recomputed from y, whose statistics did not come from the kernels' forward).
  const ops::BatchNormSaved saved{.x = y,
                                  .y = relu ? out : Tensor(),
                                  .weight = w,
                                  .bias = b,
                                  .stats = stats,
                                  .relu = relu,
                                  .add = z.defined()};
  ops::record_batch_norm(y, z, w, b, out, saved, bn.eps);
  return out;
}

}  // namespace nabla
