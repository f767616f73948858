// Internal (ops/*.cpp). The argument checks and autograd records that conv2d and batch_norm share with
// the ops built from them (ops/conv_bn.cpp), so each is written once.
#pragma once

#include "nabla/core/tensor.h"
#include "nabla/ops/conv.h"
#include "nabla/ops/detail/batch_norm.h"
#include "nabla/ops/detail/conv.h"
#include "nabla/ops/norm.h"
#include "nabla/ops/routes.h"

namespace nabla::ops {

// Validates conv2d's arguments and returns the output's shape (N, O, Ho, Wo) (ops/conv.cpp).
Shape check_conv2d(const Tensor& x, const Tensor& w, const Tensor& bias, const Conv2dOptions& o);
ConvParams conv_params(const Conv2dOptions& o);
// Records conv2d's backward for y = conv2d(x, weight, bias) when any of them needs a gradient.
// Its backward runs on `routes`, the forward's snapshot.
void record_conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& y,
                   const ConvParams& p, const Routes& routes);

// Validates batch_norm's arguments for `op` (ops/norm.cpp).
void validate_batch_norm(const char* op, const Tensor& x, const Tensor& weight, const Tensor& bias,
                         const Tensor& running_mean, const Tensor& running_var,
                         const BatchNormOptions& options);
// Records the autograd node of a training batch norm whose forward has run through the
// backend seam (ops/detail/batch_norm.h), y from x (+ residual, relu'd when saved.relu):
// BatchNormBackward, or the fused relu(bn(x) [+ residual]) node. Either hands `saved` back to the
// backend's backward.
void record_batch_norm(const Tensor& x, const Tensor& residual, const Tensor& weight, const Tensor& bias,
                       const Tensor& y, const BatchNormSaved& saved, double eps);

}  // namespace nabla::ops
