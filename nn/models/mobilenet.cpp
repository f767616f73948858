#include "nabla/nn/models/mobilenet.h"

#include <algorithm>
#include <array>
#include <cmath>

#include "nabla/nn/init.h"
#include "nabla/ops/pool.h"

namespace nabla::nn::models {

namespace {

// torchvision's _make_divisible: the nearest multiple of `divisor` to v, at least `divisor` and
// not below 90% of v.
int64_t make_divisible(double v, int64_t divisor = 8) {
  int64_t rounded = std::max<int64_t>(divisor, static_cast<int64_t>(v + divisor / 2.0) / divisor * divisor);
  if (static_cast<double>(rounded) < 0.9 * v) rounded += divisor;
  return rounded;
}

void init_mobile(Module& model);

}  // namespace

InvertedResidual::InvertedResidual(int64_t in, int64_t out, int64_t stride, int64_t expand_ratio)
    : residual_(stride == 1 && in == out) {
  NABLA_CHECK(stride == 1 || stride == 2, "InvertedResidual: stride must be 1 or 2, got {}", stride);
  const auto hidden = static_cast<int64_t>(std::lround(static_cast<double>(in * expand_ratio)));
  if (expand_ratio != 1) {
    conv.emplace_back<Conv2dNormActivation>(
        Conv2dNormActivationOptions{.in = in, .out = hidden, .kernel = 1, .activation = Activation::relu6});
  }
  conv.emplace_back<Conv2dNormActivation>(Conv2dNormActivationOptions{
      .in = hidden, .out = hidden, .stride = stride, .groups = hidden, .activation = Activation::relu6});
  conv.emplace_back<Conv2d>(Conv2dOptions{.in = hidden, .out = out, .kernel = 1, .bias = false});
  conv.emplace_back<BatchNorm2d>(out);
  register_modules({{"conv", conv}});
}

Tensor InvertedResidual::forward(const Tensor& x) {
  return residual_ ? x + conv(x) : conv(x);
}

MobileNetV2::MobileNetV2(const MobileNetV2Options& options) {
  NABLA_CHECK(
      options.num_classes > 0 && options.width_mult > 0 && options.dropout >= 0 && options.dropout < 1,
      "MobileNetV2: expected num_classes > 0, width_mult > 0 and dropout in [0, 1), got {}, {} and {}",
      options.num_classes, options.width_mult, options.dropout);
  // (expand ratio, channels, repeats, first stride), as torchvision.
  constexpr std::array<std::array<int64_t, 4>, 7> settings = {{{1, 16, 1, 1},
                                                               {6, 24, 2, 2},
                                                               {6, 32, 3, 2},
                                                               {6, 64, 4, 2},
                                                               {6, 96, 3, 1},
                                                               {6, 160, 3, 2},
                                                               {6, 320, 1, 1}}};
  int64_t channels = make_divisible(32 * options.width_mult);
  const int64_t last = make_divisible(1280 * std::max(1.0, options.width_mult));
  features.emplace_back<Conv2dNormActivation>(Conv2dNormActivationOptions{
      .in = options.in_channels, .out = channels, .stride = 2, .activation = Activation::relu6});
  for (const auto& [t, c, n, s] : settings) {
    const int64_t out = make_divisible(static_cast<double>(c) * options.width_mult);
    for (int64_t i = 0; i < n; ++i) {
      features.emplace_back<InvertedResidual>(channels, out, i == 0 ? s : 1, t);
      channels = out;
    }
  }
  features.emplace_back<Conv2dNormActivation>(
      Conv2dNormActivationOptions{.in = channels, .out = last, .kernel = 1, .activation = Activation::relu6});
  classifier.emplace_back<Dropout>(options.dropout);
  classifier.emplace_back<Linear>(LinearOptions{.in = last, .out = options.num_classes});
  register_modules({{"features", features}, {"classifier", classifier}});
  init_mobile(*this);
}

Tensor MobileNetV2::forward(const Tensor& x) {
  return classifier(adaptive_avg_pool2d(features(x), 1).flatten(1));
}

std::shared_ptr<MobileNetV2> mobilenet_v2(const MobileNetV2Options& options) {
  return std::make_shared<MobileNetV2>(options);
}

namespace {

constexpr double kV3BatchNormEps = 1e-3, kV3BatchNormMomentum = 0.01;

Conv2dNormActivationOptions v3_conv(int64_t in, int64_t out, int64_t kernel, int64_t stride, int64_t groups,
                                    Activation activation) {
  return {.in = in,
          .out = out,
          .kernel = kernel,
          .stride = stride,
          .groups = groups,
          .activation = activation,
          .bn_eps = kV3BatchNormEps,
          .bn_momentum = kV3BatchNormMomentum};
}

// torchvision's initialization of its mobile networks.
void init_mobile(Module& model) {
  model.apply([](Module& m) {
    if (auto* conv = dynamic_cast<Conv2d*>(&m)) {
      init::kaiming_normal_(conv->weight, {.mode = init::FanMode::fan_out});
      if (conv->bias.defined()) init::zeros_(conv->bias);
    } else if (auto* bn = dynamic_cast<BatchNorm2d*>(&m)) {
      init::ones_(bn->weight);
      init::zeros_(bn->bias);
    } else if (auto* fc = dynamic_cast<Linear*>(&m)) {
      init::normal_(fc->weight, 0.0, 0.01);
      init::zeros_(fc->bias);
    }
  });
}

}  // namespace

MobileNetV3Block::MobileNetV3Block(const MobileNetV3BlockConfig& c)
    : residual_(c.stride == 1 && c.in == c.out) {
  NABLA_CHECK(c.stride == 1 || c.stride == 2, "MobileNetV3Block: stride must be 1 or 2, got {}", c.stride);
  const Activation act = c.hardswish ? Activation::hardswish : Activation::relu;
  if (c.expanded != c.in) block.emplace_back<Conv2dNormActivation>(v3_conv(c.in, c.expanded, 1, 1, 1, act));
  block.emplace_back<Conv2dNormActivation>(
      v3_conv(c.expanded, c.expanded, c.kernel, c.stride, c.expanded, act));
  if (c.se) {
    block.emplace_back<SqueezeExcitation>(SqueezeExcitationOptions{
        .channels = c.expanded,
        .squeeze = make_divisible(static_cast<double>(c.expanded / 4)),  // torchvision: expanded // 4
        .scale_activation = Activation::hardsigmoid});
  }
  block.emplace_back<Conv2dNormActivation>(v3_conv(c.expanded, c.out, 1, 1, 1, Activation::none));
  register_modules({{"block", block}});
}

Tensor MobileNetV3Block::forward(const Tensor& x) {
  return residual_ ? block(x) + x : block(x);
}

MobileNetV3::MobileNetV3(const std::vector<MobileNetV3BlockConfig>& blocks, int64_t last_channel,
                         const MobileNetV3Options& options) {
  NABLA_CHECK(
      options.num_classes > 0 && options.dropout >= 0 && options.dropout < 1 && !blocks.empty() &&
          options.in_channels > 0,
      "MobileNetV3: expected num_classes > 0, dropout in [0, 1) and in_channels > 0, got {}, {} and {}",
      options.num_classes, options.dropout, options.in_channels);
  features.emplace_back<Conv2dNormActivation>(
      v3_conv(options.in_channels, blocks.front().in, 3, 2, 1, Activation::hardswish));
  for (const MobileNetV3BlockConfig& c : blocks) features.emplace_back<MobileNetV3Block>(c);
  const int64_t last_conv = 6 * blocks.back().out;
  features.emplace_back<Conv2dNormActivation>(
      v3_conv(blocks.back().out, last_conv, 1, 1, 1, Activation::hardswish));
  classifier.emplace_back<Linear>(LinearOptions{.in = last_conv, .out = last_channel});
  classifier.emplace_back<Hardswish>();
  classifier.emplace_back<Dropout>(options.dropout);
  classifier.emplace_back<Linear>(LinearOptions{.in = last_channel, .out = options.num_classes});
  register_modules({{"features", features}, {"classifier", classifier}});
  init_mobile(*this);
}

Tensor MobileNetV3::forward(const Tensor& x) {
  return classifier(adaptive_avg_pool2d(features(x), 1).flatten(1));
}

// torchvision's tables (input, kernel, expanded, output, SE, Hardswish, stride), width 1.
std::shared_ptr<MobileNetV3> mobilenet_v3_large(const MobileNetV3Options& options) {
  const std::vector<MobileNetV3BlockConfig> blocks = {
      {16, 3, 16, 16, false, false, 1},  {16, 3, 64, 24, false, false, 2},
      {24, 3, 72, 24, false, false, 1},  {24, 5, 72, 40, true, false, 2},
      {40, 5, 120, 40, true, false, 1},  {40, 5, 120, 40, true, false, 1},
      {40, 3, 240, 80, false, true, 2},  {80, 3, 200, 80, false, true, 1},
      {80, 3, 184, 80, false, true, 1},  {80, 3, 184, 80, false, true, 1},
      {80, 3, 480, 112, true, true, 1},  {112, 3, 672, 112, true, true, 1},
      {112, 5, 672, 160, true, true, 2}, {160, 5, 960, 160, true, true, 1},
      {160, 5, 960, 160, true, true, 1}};
  return std::make_shared<MobileNetV3>(blocks, 1280, options);
}

std::shared_ptr<MobileNetV3> mobilenet_v3_small(const MobileNetV3Options& options) {
  const std::vector<MobileNetV3BlockConfig> blocks = {
      {16, 3, 16, 16, true, false, 2}, {16, 3, 72, 24, false, false, 2}, {24, 3, 88, 24, false, false, 1},
      {24, 5, 96, 40, true, true, 2},  {40, 5, 240, 40, true, true, 1},  {40, 5, 240, 40, true, true, 1},
      {40, 5, 120, 48, true, true, 1}, {48, 5, 144, 48, true, true, 1},  {48, 5, 288, 96, true, true, 2},
      {96, 5, 576, 96, true, true, 1}, {96, 5, 576, 96, true, true, 1}};
  return std::make_shared<MobileNetV3>(blocks, 1024, options);
}

}  // namespace nabla::nn::models

namespace nabla::nn::models {

MBConv::MBConv(int64_t in, int64_t out, int64_t kernel, int64_t stride, int64_t expand_ratio,
               double stochastic_depth_p)
    : stochastic_depth(stochastic_depth_p, StochasticDepthMode::row), residual_(stride == 1 && in == out) {
  const int64_t expanded = make_divisible(static_cast<double>(in * expand_ratio));
  if (expanded != in) {
    block.emplace_back<Conv2dNormActivation>(
        Conv2dNormActivationOptions{.in = in, .out = expanded, .kernel = 1, .activation = Activation::silu});
  }
  block.emplace_back<Conv2dNormActivation>(Conv2dNormActivationOptions{.in = expanded,
                                                                       .out = expanded,
                                                                       .kernel = kernel,
                                                                       .stride = stride,
                                                                       .groups = expanded,
                                                                       .activation = Activation::silu});
  block.emplace_back<SqueezeExcitation>(SqueezeExcitationOptions{.channels = expanded,
                                                                 .squeeze = std::max<int64_t>(1, in / 4),
                                                                 .activation = Activation::silu,
                                                                 .scale_activation = Activation::sigmoid});
  block.emplace_back<Conv2dNormActivation>(
      Conv2dNormActivationOptions{.in = expanded, .out = out, .kernel = 1, .activation = Activation::none});
  register_modules({{"block", block}, {"stochastic_depth", stochastic_depth}});
}

Tensor MBConv::forward(const Tensor& x) {
  Tensor y = block(x);
  return residual_ ? stochastic_depth(y) + x : y;
}

EfficientNet::EfficientNet(const EfficientNetOptions& options) {
  NABLA_CHECK(
      options.num_classes > 0 && options.dropout >= 0 && options.dropout < 1 &&
          options.stochastic_depth_prob >= 0 && options.stochastic_depth_prob < 1 && options.in_channels > 0,
      "EfficientNet: expected num_classes > 0, dropout and stochastic_depth_prob in [0, 1) and in_channels "
      "> 0, got {}, {}, {} and {}",
      options.num_classes, options.dropout, options.stochastic_depth_prob, options.in_channels);
  // B0's stages (expand ratio, kernel, first stride, in, out, blocks), as torchvision.
  constexpr std::array<std::array<int64_t, 6>, 7> stages = {{{1, 3, 1, 32, 16, 1},
                                                             {6, 3, 2, 16, 24, 2},
                                                             {6, 5, 2, 24, 40, 2},
                                                             {6, 3, 2, 40, 80, 3},
                                                             {6, 5, 1, 80, 112, 3},
                                                             {6, 5, 2, 112, 192, 4},
                                                             {6, 3, 1, 192, 320, 1}}};
  int64_t total = 0;
  for (const auto& stage : stages) total += stage[5];
  features.emplace_back<Conv2dNormActivation>(Conv2dNormActivationOptions{
      .in = options.in_channels, .out = 32, .stride = 2, .activation = Activation::silu});
  int64_t index = 0;
  for (const auto& [expand, kernel, stride, in, out, blocks] : stages) {
    auto& stage = features.emplace_back<Sequential>();
    for (int64_t b = 0; b < blocks; ++b, ++index) {
      const double p =
          options.stochastic_depth_prob * static_cast<double>(index) / static_cast<double>(total);
      stage.emplace_back<MBConv>(b == 0 ? in : out, out, kernel, b == 0 ? stride : 1, expand, p);
    }
  }
  features.emplace_back<Conv2dNormActivation>(
      Conv2dNormActivationOptions{.in = 320, .out = 1280, .kernel = 1, .activation = Activation::silu});
  classifier.emplace_back<Dropout>(options.dropout);
  auto& fc = classifier.emplace_back<Linear>(LinearOptions{.in = 1280, .out = options.num_classes});
  register_modules({{"features", features}, {"classifier", classifier}});
  init_mobile(*this);
  // torchvision's EfficientNet draws its linear layer from U(-1/sqrt(out), 1/sqrt(out)).
  const double range = 1.0 / std::sqrt(static_cast<double>(options.num_classes));
  init::uniform_(fc.weight, -range, range);
}

Tensor EfficientNet::forward(const Tensor& x) {
  return classifier(adaptive_avg_pool2d(features(x), 1).flatten(1));
}

std::shared_ptr<EfficientNet> efficientnet_b0(const EfficientNetOptions& options) {
  return std::make_shared<EfficientNet>(options);
}

}  // namespace nabla::nn::models
