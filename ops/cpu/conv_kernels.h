// Internal. CPU convolution kernels (im2col + Eigen GEMM). The front end (ops/conv.cpp)
// validates, computes float16/bfloat16 in float32, makes every operand contiguous (NCHW) and
// allocates the outputs; these only compute. Also defines ConvParams, which the CUDA entry
// points (ops/cuda/conv/kernels.h) share.
#pragma once

#include <array>
#include <cstdint>

#include "nabla/core/tensor.h"

namespace nabla::ops {

// The geometry of a 2-d convolution, (height, width) pairs, already validated.
struct ConvParams {
  std::array<int64_t, 2> stride{1, 1};
  std::array<int64_t, 2> padding{0, 0};
  std::array<int64_t, 2> dilation{1, 1};
  int64_t groups = 1;
};

}  // namespace nabla::ops

namespace nabla::ops::cpu {

// y (N, O, Ho, Wo) = conv(x (N, C, H, W), w (O, C / groups, kH, kW)) + bias (O, or undefined).
// Every tensor contiguous, one dtype, float32 or float64.
void conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& y,
                    const ConvParams& p);
// grad_x (N, C, H, W) from grad_y (N, O, Ho, Wo) and w; overwrites grad_x.
void conv2d_backward_input(const Tensor& grad_y, const Tensor& w, const Tensor& grad_x, const ConvParams& p);
// grad_w (O, C / groups, kH, kW) from grad_y and x, summed over the batch; overwrites grad_w.
void conv2d_backward_weight(const Tensor& grad_y, const Tensor& x, const Tensor& grad_w, const ConvParams& p);

}  // namespace nabla::ops::cpu
