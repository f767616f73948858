// Public header. Convolutions joined to the training batch norms between them: the
// conv -> batch norm -> ReLU -> conv chains of ResNet's blocks (and VGG-BN's, DenseNet's, ...).
//
//   nabla::ChannelSums s1, s2;
//   nabla::Tensor y1 = nabla::conv2d_sums(x, w1, {}, &s1);
//   nabla::Tensor y2 = nabla::batch_norm_relu_conv2d(y1, s1, gamma1, beta1, running_mean1, running_var1,
//                                                    {}, w2, {.padding = 1}, &s2);
//
// gives the values, gradients and running-stat updates of
//   y1 = conv2d(x, w1);
//   y2 = conv2d(batch_norm_relu(y1, gamma1, beta1, running_mean1, running_var1), w2, {}, {.padding = 1});
// On CUDA, for channels_last float16 training (bfloat16, and Routes::cudnn_deterministic or
// !Routes::conv_batch_norm_fusion in ops/routes.h, compose), the work
// moves into the convolutions (Note [Convolution + batch norm fusion] in ops/cuda/conv/bn_fused.cpp): the
// convolution that writes y1 also sums it per channel, so the batch norm never reads y1 for its statistics;
// the batch norm and ReLU are applied while the next convolution loads y1, so relu(bn(y1)) is never written
// or kept for the backward; and the backward masks, reduces and applies the batch norm's gradient around the
// data-gradient convolution. Where that cannot run (the CPU, eval, other dtypes or layouts, a convolution
// bias, groups, a shape cuDNN has no engine for) the ops are composed, and the sums are left undefined.
// Results agree with the composition within float16 rounding; the batch norm's scale and shift are rounded to
// float16 in the fused load.
#pragma once

#include <cstdint>
#include <memory>

#include "nabla/core/tensor.h"
#include "nabla/ops/conv.h"
#include "nabla/ops/norm.h"

namespace nabla {

// The per-channel sums of a convolution's output y, computed by the convolution for the batch
// norm that reads y. They describe that one tensor (not a view of it, nor another tensor at its
// address) at one version: a y written to since is normalized by the composed ops instead,
// never with stale sums.
struct ChannelSums {
  Tensor sum, sqsum;  // (C) float32: sums of y and of y^2 over (N, H, W)
  std::weak_ptr<const TensorImpl> tensor;
  uint32_t version = 0;
  bool describes(const Tensor& y) const;
};

// conv2d(x, weight) (no bias), and its output's per-channel sums in `sums` where the convolution
// can compute them (left undefined otherwise).
Tensor conv2d_sums(const Tensor& x, const Tensor& weight, Conv2dOptions options, ChannelSums* sums);

// conv2d(batch_norm_relu(y, bn_weight, bn_bias, running_mean, running_var, bn), weight, {}, conv),
// given the sums of y (from conv2d_sums or an earlier batch_norm_relu_conv2d; undefined sums
// compose the ops). When out_sums is given, the result's sums go there as conv2d_sums leaves them.
Tensor batch_norm_relu_conv2d(const Tensor& y, const ChannelSums& sums, const Tensor& bn_weight,
                              const Tensor& bn_bias, Tensor& running_mean, Tensor& running_var,
                              BatchNormOptions bn, const Tensor& weight, Conv2dOptions conv,
                              ChannelSums* out_sums = nullptr);

// A training batch norm of a y whose sums its convolution left: batch_norm (relu false, no
// residual), batch_norm_relu (relu) or batch_norm_add_relu (relu and a residual), with the
// batch statistics taken from the sums instead of a pass over y, and the normalization (with the
// sum and the ReLU) one elementwise pass; the backward is the batch norm's usual one. On CUDA for
// channels_last float16; elsewhere, or with sums that do not describe y, the op named above
// runs. The residual block's ending relu(bn3(y3) + x) and its downsampling batch norm take it.
Tensor batch_norm_from_sums(const Tensor& y, const ChannelSums& sums, const Tensor& residual, bool relu,
                            const Tensor& weight, const Tensor& bias, Tensor& running_mean,
                            Tensor& running_var, BatchNormOptions options = {});

}  // namespace nabla
