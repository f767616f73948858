#include "nabla/nn/vision_blocks.h"

#include "nabla/ops/elementwise.h"
#include "nabla/ops/factory.h"
#include "nabla/ops/pool.h"

namespace nabla::nn {

Tensor activate(Activation activation, const Tensor& x) {
  switch (activation) {
    case Activation::none:
      return x;
    case Activation::relu:
      return relu(x);
    case Activation::relu6:
      return clamp(x, 0.0, 6.0);
    case Activation::silu:
      return silu(x);
    case Activation::hardswish:
      return hardswish(x);
    case Activation::hardsigmoid:
      return hardsigmoid(x);
    case Activation::sigmoid:
      return sigmoid(x);
  }
  NABLA_CHECK(false, "activate: unknown activation {}", static_cast<int>(activation));
  return x;
}

Conv2dNormActivation::Conv2dNormActivation(const Conv2dNormActivationOptions& o) : activation_(o.activation) {
  NABLA_CHECK(o.kernel > 0 && o.stride > 0 && o.dilation > 0,
              "Conv2dNormActivation: kernel, stride and dilation must be > 0, got {}, {} and {}", o.kernel,
              o.stride, o.dilation);
  const int64_t padding = (o.kernel - 1) / 2 * o.dilation;
  emplace_back<Conv2d>(Conv2dOptions{.in = o.in,
                                     .out = o.out,
                                     .kernel = o.kernel,
                                     .stride = o.stride,
                                     .padding = padding,
                                     .dilation = o.dilation,
                                     .groups = o.groups,
                                     .bias = false});
  emplace_back<BatchNorm2d>(o.out, BatchNorm2dOptions{.eps = o.bn_eps, .momentum = o.bn_momentum});
}

Tensor Conv2dNormActivation::forward(const Tensor& x) {
  return activate(activation_, Sequential::forward(x));
}

SqueezeExcitation::SqueezeExcitation(const SqueezeExcitationOptions& o)
    : fc1({.in = o.channels, .out = o.squeeze, .kernel = 1}),
      fc2({.in = o.squeeze, .out = o.channels, .kernel = 1}),
      options_(o) {
  register_modules({{"fc1", fc1}, {"fc2", fc2}});
}

Tensor SqueezeExcitation::forward(const Tensor& x) {
  const Tensor scale =
      activate(options_.scale_activation, fc2(activate(options_.activation, fc1(adaptive_avg_pool2d(x, 1)))));
  return x * scale;
}

Tensor stochastic_depth(const Tensor& x, double p, StochasticDepthMode mode, bool training) {
  NABLA_CHECK(p >= 0 && p <= 1, "stochastic_depth: expected a probability p in [0, 1], got {}", p);
  NABLA_CHECK(x.defined() && x.dim() >= 1, "stochastic_depth: expected an input with a batch dim, got {}",
              describe(x));
  if (!training || p == 0.0) return x;
  Shape shape(static_cast<size_t>(x.dim()), 1);
  if (mode == StochasticDepthMode::row) shape[0] = x.size(0);
  const Tensor keep = bernoulli(shape, 1.0 - p, {.dtype = x.dtype(), .device = x.device()});
  return p == 1.0 ? x * keep : x * (keep * (1.0 / (1.0 - p)));
}

StochasticDepth::StochasticDepth(double p, StochasticDepthMode mode) : p_(p), mode_(mode) {
  NABLA_CHECK(p >= 0 && p <= 1, "StochasticDepth: p must be in [0, 1], got {}", p);
}

}  // namespace nabla::nn
