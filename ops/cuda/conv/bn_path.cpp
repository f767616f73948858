// The CUDA backend of the convolution + batch-norm path (ops/detail/conv_batch_norm.h): each step
// on cuDNN's fusion engines (conv/bn_fused.cpp) where one takes it, else its unfused equivalent
// from the same scale and shift (the prologue written out, a plain convolution, nabla's
// batch-norm kernels), with the same values up to rounding.
#include "nabla/ops/cuda/conv/bn_kernels.h"
#include "nabla/ops/detail/conv_batch_norm.h"

namespace nabla::ops::cuda {

namespace {

constexpr MemoryFormat kChannelsLast = MemoryFormat::ChannelsLast;

Tensor empty_channels_last(const Shape& sizes, const Tensor& like) {
  return Tensor::empty(sizes,
                       {.dtype = like.dtype(), .device = like.device(), .memory_format = kChannelsLast});
}

Tensor per_channel(int64_t channels, const Tensor& like) {
  return Tensor::empty({channels}, {.dtype = kFloat32, .device = like.device()});
}

// relu(y * scale + shift), written out.
Tensor affine_relu(const Tensor& y, const Tensor& scale, const Tensor& shift) {
  Tensor a = empty_channels_last(y.sizes(), y);
  batch_norm_affine_relu(y, scale, shift, a);
  return a;
}

bool conv_sums(const Tensor& x, const Tensor& w, const Tensor& y, const Tensor& sum, const Tensor& sqsum,
               const ConvParams& p, const Routes& routes) {
  return conv2d_forward_stats(x, {}, w, y, sum, sqsum, p, routes);
}

bool bn_relu_conv_forward(const Tensor& sum, const Tensor& sqsum, int64_t count, const BnReluConvSaved& s,
                          const Tensor& running_mean, const Tensor& running_var, double momentum, double eps,
                          const Tensor& z, const Tensor& z_sum, const Tensor& z_sqsum, bool want_sums,
                          const ConvParams& p, const Routes& routes) {
  batch_norm_stats_from_sums(sum, sqsum, count, {s.y, s.gamma, s.beta, running_mean, running_var},
                             {s.mean, s.invstd}, momentum, eps, s.scale, s.shift);
  if (running_mean.defined()) running_mean.bump_version(), running_var.bump_version();
  // Without sums wanted, a pointwise convolution runs faster as its GEMM on the written-out
  // prologue than as the fused engine (bench/cuda/conv_bn_fusion.cpp). The weight gradient
  // stays fused everywhere: the same choice there is measured per shape but not yet taken.
  const bool gemm = !want_sums && conv2d_is_pointwise_gemm(s.y, s.w, p);
  const bool fused = !gemm && conv2d_forward_stats(s.y, {.scale = s.scale, .bias = s.shift}, s.w, z, z_sum,
                                                   z_sqsum, p, routes);
  if (!fused) conv2d_forward(affine_relu(s.y, s.scale, s.shift), s.w, Tensor(), z, p, routes);
  return fused;
}

BnReluConvGrads bn_relu_conv_backward(const Tensor& dz, const BnReluConvSaved& s,
                                      const std::vector<bool>& needs, const ConvParams& p,
                                      const Routes& routes) {
  BnReluConvGrads g;
  const AffineRelu prologue{.scale = s.scale, .bias = s.shift};
  if (needs[3]) {
    g.dw = empty_channels_last(s.w.sizes(), s.w);
    if (!conv2d_backward_weight_affine_relu(dz, s.y, prologue, g.dw, p, routes))
      conv2d_backward_weight(dz, affine_relu(s.y, s.scale, s.shift), g.dw, p, routes);
  }
  if (needs[0] || needs[1] || needs[2]) {
    const int64_t c = s.y.size(1);
    g.dy = empty_channels_last(s.y.sizes(), s.y);
    g.dgamma = per_channel(c, s.y);
    g.dbeta = per_channel(c, s.y);
    const Tensor grad_pre = empty_channels_last(s.y.sizes(), s.y);
    const Tensor coefficients = per_channel(3 * c, s.y);
    const BatchNormBackwardCoefficients out{.dweight = g.dgamma,
                                            .dbias = g.dbeta,
                                            .eq_dy = coefficients.narrow(0, 0, c),
                                            .eq_x = coefficients.narrow(0, c, c),
                                            .eq_bias = coefficients.narrow(0, 2 * c, c)};
    if (conv2d_backward_input_batch_norm_relu(dz, s.w, s.y, {s.mean, s.invstd, s.gamma, s.beta}, grad_pre,
                                              out, p, routes)) {
      batch_norm_grad_from_coefficients(grad_pre, s.y, coefficients, g.dy);
    } else {
      conv2d_backward_input(dz, s.w, grad_pre, p, routes);
      batch_norm_backward_kernel(grad_pre, s.y, s.gamma, {s.mean, s.invstd},
                                 {.dx = g.dy, .dresidual = Tensor(), .dweight = g.dgamma, .dbias = g.dbeta},
                                 affine_relu(s.y, s.scale, s.shift));
    }
  }
  return g;
}

void bn_from_sums(const Tensor& sum, const Tensor& sqsum, const BatchNormInputs& in,
                  const BatchNormStats& stats, double momentum, double eps, const Tensor& residual, bool relu,
                  const Tensor& out) {
  const Tensor& y = in.x;
  const int64_t c = y.size(1);
  const Tensor coefficients = per_channel(2 * c, y);  // scale, then shift
  batch_norm_stats_from_sums(sum, sqsum, y.numel() / c, in, stats, momentum, eps,
                             coefficients.narrow(0, 0, c), coefficients.narrow(0, c, c));
  batch_norm_apply(y, coefficients, residual, relu, out);
}

}  // namespace

const ConvBatchNorm kConvBatchNorm{.conv_sums = conv_sums,
                                   .bn_relu_conv_forward = bn_relu_conv_forward,
                                   .bn_relu_conv_backward = bn_relu_conv_backward,
                                   .bn_from_sums = bn_from_sums};

}  // namespace nabla::ops::cuda
