// The CUDA convolution family's route table and its backend. Every route a convolution can take is chosen
// here, by conv_route, per direction (x, w, y in their forward roles):
//
//   forward or filter gradient, channels_last bfloat16 x of at most
//     4 channels, stride 2 (Note [Strided convolutions of few channels
//     as space-to-depth] in space_to_depth.cu)                        -> SpaceToDepth
//   data gradient of a stride-2 3x3/5x5 depthwise convolution, NHWC
//     (Note [Depthwise convolutions] in depthwise.cu)                 -> DepthwiseKernel
//   1x1, stride 1, no padding, one group, channels_last, not float64
//     (Note [Pointwise convolutions as GEMMs] in conv.cpp)            -> PointwiseGemm
//   channels_last float16/bfloat16, channels in 8s, and grouped or
//     outside deterministic mode (Note [Convolutions on the graph API]
//     in conv.cpp)                                                    -> GraphApi
//   anything else                                                     -> Legacy
//
// SpaceToDepth runs a stride-1 convolution, which is routed again. GraphApi falls back to Legacy
// where cuDNN declines the problem at run time (alignment, no engine). The fused entry points
// of conv/bn_kernels.h (statistics, prologues, epilogues) are the conv-BN path's and not routes
// of a plain convolution.
#include <array>

#include "nabla/ops/cuda/conv/kernels.h"

namespace nabla::ops::cuda {

namespace {

constexpr std::array kRoutes = {ConvRoute::SpaceToDepth, ConvRoute::PointwiseGemm, ConvRoute::DepthwiseKernel,
                                ConvRoute::GraphApi, ConvRoute::Legacy};

// What cuDNN's graph route takes at all (conv2d_graph refuses the rest, and misaligned tensors).
bool graph_api_takes(const Tensor& x, const Tensor& w, const Tensor& y, const ConvParams& p,
                     const Routes& routes) {
  if (p.groups == 1 && routes.cudnn_deterministic) return false;
  for (const Tensor* t : {&x, &w, &y}) {
    if (t->dim() != 4 || !is_reduced_float(t->dtype()) || t->dtype() != x.dtype() ||
        !t->is_contiguous(MemoryFormat::ChannelsLast))
      return false;
  }
  return x.size(1) % 8 == 0 && y.size(1) % 8 == 0;
}

}  // namespace

std::span<const ConvRoute> conv_routes() {
  return kRoutes;
}

const char* route_name(ConvRoute route) {
  switch (route) {
    case ConvRoute::SpaceToDepth:
      return "space-to-depth";
    case ConvRoute::PointwiseGemm:
      return "pointwise GEMM";
    case ConvRoute::DepthwiseKernel:
      return "depthwise kernel";
    case ConvRoute::GraphApi:
      return "cuDNN graph API";
    case ConvRoute::Legacy:
      return "cuDNN legacy";
  }
  return "unknown";
}

ConvRoute conv_route(ConvDirection direction, const Tensor& x, const Tensor& w, const Tensor& y,
                     const ConvParams& p, const Routes& routes) {
  if (direction != ConvDirection::BackwardData && takes_space_to_depth(x, w, y, p))
    return ConvRoute::SpaceToDepth;
  if (direction == ConvDirection::BackwardData && depthwise_conv2d_backward_input_supported(x, w, y, p))
    return ConvRoute::DepthwiseKernel;
  if (conv2d_is_pointwise_gemm(x, w, p)) return ConvRoute::PointwiseGemm;
  if (graph_api_takes(x, w, y, p, routes)) return ConvRoute::GraphApi;
  return ConvRoute::Legacy;
}

// The CUDA convolution backend (ops/detail/conv.h). cuDNN has no NHWC float64 convolutions, so
// float64 runs NCHW (as PyTorch does); every other dtype runs in the activations' own layout.
const Convolution kConvolution{
    .layout = [](MemoryFormat format,
                 DType dtype) { return dtype == kFloat64 ? MemoryFormat::Contiguous : format; },
    .forward = conv2d_forward,
    .forward_relu = conv2d_forward_relu,
    .backward_input = conv2d_backward_input,
    .backward_input_accumulate = conv2d_backward_input_accumulate,
    .backward_weight = conv2d_backward_weight};

}  // namespace nabla::ops::cuda
