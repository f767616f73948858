// Internal. Convolutions fused with the batch-norm work around them, on cuDNN's backend graph
// API (Note [Convolution + batch norm fusion] in conv/bn_fused.cpp). Plain C++ so front ends
// compile without nvcc.
//
// The convolutions take channels_last float16/bfloat16 x, w and y (one dtype) and per-channel
// (C) tensors, and return false, having written nothing, where cuDNN offers no engine for the
// call; `why` (optional) then says why. The caller runs the unfused ops instead. Nothing
// synchronizes the host except the one-time timing of candidate plans in benchmark mode.
#pragma once

#include <string>

#include "nabla/core/tensor.h"
#include "nabla/ops/cuda/batch_norm/kernels.h"
#include "nabla/ops/cuda/conv/kernels.h"
#include "nabla/ops/detail/conv.h"

namespace nabla::ops::cuda {

// A batch norm's apply step folded into a per-channel affine map, followed by a ReLU:
// relu(x * scale + bias). Both (C) float32; undefined scale means "no prologue" (x as it is).
struct AffineRelu {
  Tensor scale, bias;
  bool defined() const { return scale.defined(); }
};

// y = conv(prologue(x), w), and sum / sqsum (O) = the per-channel sums of y and of y^2 over
// (N, H, W), accumulated from the float32 results before rounding to y's dtype.
bool conv2d_forward_stats(const Tensor& x, const AffineRelu& prologue, const Tensor& w, const Tensor& y,
                          const Tensor& sum, const Tensor& sqsum, const ConvParams& p, const Routes& routes,
                          std::string* why = nullptr);

// grad_w = the weight gradient of conv(relu(x * scale + bias), w): the normalized input is
// recomputed in the convolution's load, never written.
bool conv2d_backward_weight_affine_relu(const Tensor& grad_y, const Tensor& x, const AffineRelu& prologue,
                                        const Tensor& grad_w, const ConvParams& p, const Routes& routes,
                                        std::string* why = nullptr);

// grad_pre = dgrad(grad_y, w) where x * scale + bias > 0, else 0: the gradient reaching the
// input of the prologue's ReLU.
bool conv2d_backward_input_relu_mask(const Tensor& grad_y, const Tensor& w, const Tensor& x,
                                     const AffineRelu& prologue, const Tensor& grad_pre, const ConvParams& p,
                                     const Routes& routes, std::string* why = nullptr);

// What a training batch norm saved, all (C) float32: the batch mean and inverse standard
// deviation, and its affine weight (gamma) and bias (beta).
struct BatchNormParams {
  Tensor mean, invstd, weight, bias;
};
// The batch norm's weight gradients and the per-channel coefficients of its input gradient
// grad_x = eq_dy * grad_pre + eq_x * x + eq_bias, all (C) float32.
struct BatchNormBackwardCoefficients {
  Tensor dweight, dbias, eq_dy, eq_x, eq_bias;
};
// The backward of z = conv(relu(batch_norm(x)), w) as far as the batch norm's reductions:
// grad_pre = dgrad(grad_z, w) where batch_norm(x) > 0, else 0, and `out` from grad_pre and x.
bool conv2d_backward_input_batch_norm_relu(const Tensor& grad_z, const Tensor& w, const Tensor& x,
                                           const BatchNormParams& bn, const Tensor& grad_pre,
                                           const BatchNormBackwardCoefficients& out, const ConvParams& p,
                                           const Routes& routes, std::string* why = nullptr);

// From a convolution's per-channel sums of y and y^2 over `count` elements per channel: the
// batch mean and inverse standard deviation (stats), the running statistics updated in place as
// PyTorch does (momentum, unbiased variance; when defined), and the batch norm folded into
// y * scale + shift, scale and shift (C) float32 or y's 16-bit dtype (a prologue's). Parameters
// and statistics are (C) float32; weight and bias may be undefined (ones and zeros).
void batch_norm_stats_from_sums(const Tensor& sum, const Tensor& sqsum, int64_t count,
                                const BatchNormInputs& in, const BatchNormStats& stats, double momentum,
                                double eps, const Tensor& scale, const Tensor& shift);
// dx = eq_dy * grad_pre + eq_x * x + eq_bias per channel, channels_last x, grad_pre and dx of
// one dtype; coefficients is one (3 C) float32 buffer: eq_dy, then eq_x, then eq_bias.
void batch_norm_grad_from_coefficients(const Tensor& grad_pre, const Tensor& x, const Tensor& coefficients,
                                       const Tensor& dx);

// y = x * scale + shift [+ residual], then a ReLU when `relu`, per channel: channels_last x,
// residual (may be undefined) and y of one 16-bit dtype; coefficients one (2 C) float32 buffer:
// scale, then shift (batch_norm_stats_from_sums' float32 outputs). batch_norm_from_sums' forward.
void batch_norm_apply(const Tensor& x, const Tensor& coefficients, const Tensor& residual, bool relu,
                      const Tensor& y);

// out = relu(y * scale + shift) per channel: channels_last y and out, (C) scale and shift, all
// of y's 16-bit dtype. The fused prologue, written out where no fused engine runs.
void batch_norm_affine_relu(const Tensor& y, const Tensor& scale, const Tensor& shift, const Tensor& out);

// y = conv(x, w) + bias [+ residual], then a ReLU when `relu`, in the convolution's epilogue
// (an inference convolution with its batch norm folded in, nn::fold_batch_norm): y is written
// once. bias (O) is float32 or y's dtype; residual (may be undefined) is laid out as y.
bool conv2d_forward_bias_relu(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& residual,
                              bool relu, const Tensor& y, const ConvParams& p, const Routes& routes,
                              std::string* why = nullptr);

// A grouped convolution (groups > 1, depthwise included) on the graph API's engines (Note
// [Grouped convolutions on the graph API] in conv/bn_fused.cpp), for one direction: x (or
// grad_x), w (or grad_w) and y (or grad_y) are what the forward would see; the direction's
// output is overwritten. channels_last float16/bfloat16, channel counts in 8s.
bool conv2d_graph(ConvDirection direction, const Tensor& x, const Tensor& w, const Tensor& y,
                  const ConvParams& p, const Routes& routes, std::string* why = nullptr);

// The engine of the last fused call on this thread (any pattern), for benchmarks.
std::string conv_bn_last_engine();

}  // namespace nabla::ops::cuda
