// Internal. CUDA convolution entry points (cuDNN), in plain C++ so front ends compile without
// nvcc. The front end validates and allocates; x (or grad_x), w (or grad_w) and y (or grad_y)
// arrive dense in one memory format, NCHW (contiguous) or NHWC (channels_last), which becomes
// the cuDNN tensor and filter format. float32, float64, float16 and bfloat16 (float32
// accumulation). Every call runs on the current stream of the tensors' device; none
// synchronizes the host, except the one-time algorithm search of benchmark mode.
#pragma once

#include <cstdint>
#include <span>

#include "nabla/core/tensor.h"
#include "nabla/ops/detail/conv.h"
#include "nabla/ops/routes.h"

namespace nabla::ops::cuda {

// The three computations of a convolution. Calls taking a direction see x (or grad_x), w (or
// grad_w) and y (or grad_y) in their forward roles; the direction's output is overwritten.
enum class ConvDirection { Forward, BackwardData, BackwardWeight };

// Every route of a CUDA convolution (route table: conv/routes.cpp). conv2d_forward,
// conv2d_backward_input and conv2d_backward_weight take the route conv_route gives them.
enum class ConvRoute : uint8_t {
  SpaceToDepth,     // a stride-2 convolution of few channels, folded to stride 1 and routed again
  PointwiseGemm,    // a 1x1 stride-1 convolution as one cuBLASLt GEMM
  DepthwiseKernel,  // nabla's stride-2 depthwise data-gradient kernel
  GraphApi,         // cuDNN's backend graph API (falls back to Legacy where cuDNN declines)
  Legacy,           // cuDNN's cudnnConvolution* calls
};
std::span<const ConvRoute> conv_routes();
const char* route_name(ConvRoute route);
ConvRoute conv_route(ConvDirection direction, const Tensor& x, const Tensor& w, const Tensor& y,
                     const ConvParams& p, const Routes& routes);

// y = conv(x, w) + bias (bias (O) or undefined).
void conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& y,
                    const ConvParams& p, const Routes& routes);
// y = relu(conv(x, w) + bias [+ residual]) in one cuDNN call (x, w, y, residual in one layout and
// dtype, float32/float16/bfloat16; bias (O), any floating dtype). Returns false, having written
// nothing, where cuDNN declines the combination: the caller composes.
bool conv2d_forward_relu(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& residual,
                         const Tensor& y, const ConvParams& p, const Routes& routes);
// grad_x += the gradient of conv(x, w) with respect to x, where the convolution runs as its GEMM
// (conv2d_is_pointwise_gemm): the sum in the GEMM's epilogue. False, having written nothing,
// elsewhere (cuDNN's benchmark search would write over grad_x while it times).
bool conv2d_backward_input_accumulate(const Tensor& grad_y, const Tensor& w, const Tensor& grad_x,
                                      const ConvParams& p, const Routes& routes);
// grad_x = the gradient of conv(x, w) with respect to x; overwrites grad_x.
void conv2d_backward_input(const Tensor& grad_y, const Tensor& w, const Tensor& grad_x, const ConvParams& p,
                           const Routes& routes);
// grad_w = the gradient with respect to w, summed over the batch; overwrites grad_w.
void conv2d_backward_weight(const Tensor& grad_y, const Tensor& x, const Tensor& grad_w, const ConvParams& p,
                            const Routes& routes);

// Whether a convolution of these tensors runs as one cuBLASLt GEMM (Note [Pointwise convolutions
// as GEMMs] in conv/conv.cpp): 1x1, stride 1, no padding, one group, channels_last 16/32-bit. `act`
// is x or grad_x.
bool conv2d_is_pointwise_gemm(const Tensor& act, const Tensor& w, const ConvParams& p);

// The data gradient of a stride-2 depthwise convolution on nabla's kernel (Note [Depthwise
// convolutions] in conv/depthwise.cu): groups == in == out channels, 3x3 or 5x5 with padding
// k / 2, dilation 1, grad_x and grad_y NHWC in memory, float32/float16/bfloat16.
// conv2d_backward_input routes here whenever it is supported.
bool depthwise_conv2d_backward_input_supported(const Tensor& grad_x, const Tensor& w, const Tensor& grad_y,
                                               const ConvParams& p);
void depthwise_conv2d_backward_input(const Tensor& grad_y, const Tensor& w, const Tensor& grad_x,
                                     const ConvParams& p);

// Note [Strided convolutions of few channels as space-to-depth] (conv/space_to_depth.cu): whether
// conv(x, w) -> y folds into a stride-1 convolution of space_to_depth_input(x, ...) with
// space_to_depth_weight(w), no padding (channels_last bfloat16 x of at most 4 channels, stride 2).
// grad_w takes weight_grad_from_space_to_depth of the folded convolution's weight gradient.
bool takes_space_to_depth(const Tensor& x, const Tensor& w, const Tensor& y, const ConvParams& p);
Tensor space_to_depth_input(const Tensor& x, const Tensor& w, const Tensor& y, const ConvParams& p);
Tensor space_to_depth_weight(const Tensor& w);
void weight_grad_from_space_to_depth(const Tensor& folded, const Tensor& grad_w);

// Forgets every cached algorithm choice (tests; a changed workspace budget).
void clear_conv_algorithm_cache();
// How many (shape, direction, routes) choices are cached.
size_t conv_algorithm_cache_size();

}  // namespace nabla::ops::cuda
