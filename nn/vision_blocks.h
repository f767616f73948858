// Public header. The building blocks of torchvision's mobile and efficient networks, with its
// module and parameter names, so their state dicts load unchanged:
//
//   nn::Conv2dNormActivation stem({.in = 3, .out = 32, .kernel = 3, .stride = 2,
//                                  .activation = nn::Activation::relu6});  // "0" conv, "1" bn
//   nn::SqueezeExcitation se({.channels = 96, .squeeze = 24});                // fc1, fc2
//   nn::StochasticDepth drop(0.2, nn::StochasticDepthMode::row);
#pragma once

#include <cstdint>

#include "nabla/nn/containers.h"
#include "nabla/nn/layers.h"

namespace nabla::nn {

enum class Activation { none, relu, relu6, silu, hardswish, hardsigmoid, sigmoid };
// The activation by value (none: x itself).
Tensor activate(Activation activation, const Tensor& x);

// min(max(x, 0), 6), MobileNetV2's activation.
class ReLU6 : public Module {
 public:
  Tensor forward(const Tensor& x) override { return activate(Activation::relu6, x); }
};

// torchvision.ops.Conv2dNormActivation: Conv2d (no bias) "0", BatchNorm2d "1", then the
// activation (it has no parameters, so it is applied, not registered). Padding defaults to
// (kernel - 1) / 2 * dilation, which keeps the size at stride 1.
struct Conv2dNormActivationOptions {
  int64_t in = 0;
  int64_t out = 0;
  int64_t kernel = 3;
  int64_t stride = 1;
  int64_t groups = 1;
  int64_t dilation = 1;
  Activation activation = Activation::relu;
  double bn_eps = 1e-5;
  double bn_momentum = 0.1;
};
class Conv2dNormActivation : public Sequential {
 public:
  explicit Conv2dNormActivation(const Conv2dNormActivationOptions& options);
  Tensor forward(const Tensor& x) override;

 private:
  Activation activation_;
};

// torchvision.ops.SqueezeExcitation: x * scale_activation(fc2(activation(fc1(avgpool(x))))),
// fc1 and fc2 1x1 convolutions with biases (channels -> squeeze -> channels).
struct SqueezeExcitationOptions {
  int64_t channels = 0;
  int64_t squeeze = 0;
  Activation activation = Activation::relu;
  Activation scale_activation = Activation::sigmoid;
};
class SqueezeExcitation : public Module {
 public:
  explicit SqueezeExcitation(const SqueezeExcitationOptions& options);
  Tensor forward(const Tensor& x) override;
  Conv2d fc1, fc2;

 private:
  SqueezeExcitationOptions options_;
};

// torchvision.ops.StochasticDepth: in training, drops the whole input (row: each sample
// independently; batch: all samples together) with probability p and scales what is kept by
// 1 / (1 - p); the identity in eval or at p = 0.
enum class StochasticDepthMode { row, batch };
Tensor stochastic_depth(const Tensor& x, double p, StochasticDepthMode mode, bool training);
class StochasticDepth : public Module {
 public:
  StochasticDepth(double p, StochasticDepthMode mode);
  Tensor forward(const Tensor& x) override { return stochastic_depth(x, p_, mode_, is_training()); }

 private:
  double p_;
  StochasticDepthMode mode_;
};

}  // namespace nabla::nn
