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
  // torchvision's initialization.
  apply([](Module& m) {
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

Tensor MobileNetV2::forward(const Tensor& x) {
  return classifier(adaptive_avg_pool2d(features(x), 1).flatten(1));
}

std::shared_ptr<MobileNetV2> mobilenet_v2(const MobileNetV2Options& options) {
  return std::make_shared<MobileNetV2>(options);
}

}  // namespace nabla::nn::models
