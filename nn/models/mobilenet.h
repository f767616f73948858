// Public header. MobileNetV2 (Sandler et al. 2018) as torchvision builds it, with its module
// and parameter names (features.{i}.conv.{j}..., classifier.1), so torchvision's state dicts
// load with strict = true:
//
//   auto model = nabla::nn::models::mobilenet_v2({.num_classes = 1000});
//   auto logits = model->forward(images);  // (N, 3, H, W) -> (N, num_classes)
#pragma once

#include <memory>
#include <vector>

#include "nabla/nn/containers.h"
#include "nabla/nn/vision_blocks.h"

namespace nabla::nn::models {

// torchvision's InvertedResidual: [1x1 expand (ReLU6)] -> 3x3 depthwise (ReLU6) -> 1x1 project
// -> BatchNorm, with the input added when the shape is kept.
class InvertedResidual : public Module {
 public:
  InvertedResidual(int64_t in, int64_t out, int64_t stride, int64_t expand_ratio);
  Tensor forward(const Tensor& x) override;
  Sequential conv;

 private:
  bool residual_;
};

struct MobileNetV2Options {
  int64_t num_classes = 1000;
  double width_mult = 1.0;
  double dropout = 0.2;     // before the classifier, in training
  int64_t in_channels = 3;  // the images' channels (torchvision: always 3)
};
class MobileNetV2 : public Module {
 public:
  explicit MobileNetV2(const MobileNetV2Options& options = {});
  Tensor forward(const Tensor& x) override;
  Sequential features, classifier;
};

std::shared_ptr<MobileNetV2> mobilenet_v2(const MobileNetV2Options& options = {});

// MobileNetV3 (Howard et al. 2019) as torchvision builds it (features.{i}.block.{j}...,
// classifier.0 and classifier.3): inverted residuals with 3x3 or 5x5 depthwise convolutions,
// ReLU or Hardswish, squeeze-excitation (Hardsigmoid scale) in some blocks, batch norms with
// eps 1e-3 and momentum 0.01.
struct MobileNetV3BlockConfig {
  int64_t in, kernel, expanded, out;
  bool se;
  bool hardswish;  // else ReLU
  int64_t stride;
};
class MobileNetV3Block : public Module {
 public:
  explicit MobileNetV3Block(const MobileNetV3BlockConfig& config);
  Tensor forward(const Tensor& x) override;
  Sequential block;

 private:
  bool residual_;
};

struct MobileNetV3Options {
  int64_t num_classes = 1000;
  double dropout = 0.2;     // before the last linear layer, in training
  int64_t in_channels = 3;  // the images' channels (torchvision: always 3)
};
class MobileNetV3 : public Module {
 public:
  MobileNetV3(const std::vector<MobileNetV3BlockConfig>& blocks, int64_t last_channel,
              const MobileNetV3Options& options);
  Tensor forward(const Tensor& x) override;
  Sequential features, classifier;
};

std::shared_ptr<MobileNetV3> mobilenet_v3_large(const MobileNetV3Options& options = {});
std::shared_ptr<MobileNetV3> mobilenet_v3_small(const MobileNetV3Options& options = {});

// EfficientNet-B0 (Tan & Le 2019) as torchvision builds it (features.{stage}.{i}.block.{j}...,
// classifier.1): MBConv blocks with SiLU, squeeze-excitation (sigmoid scale) and stochastic
// depth on the residual, its probability growing linearly with the block's depth.
class MBConv : public Module {
 public:
  MBConv(int64_t in, int64_t out, int64_t kernel, int64_t stride, int64_t expand_ratio,
         double stochastic_depth);
  Tensor forward(const Tensor& x) override;
  Sequential block;
  StochasticDepth stochastic_depth;

 private:
  bool residual_;
};

struct EfficientNetOptions {
  int64_t num_classes = 1000;
  double dropout = 0.2;                // before the classifier, in training
  double stochastic_depth_prob = 0.2;  // the last block's; block i of n gets p * i / n
  int64_t in_channels = 3;             // the images' channels (torchvision: always 3)
};
class EfficientNet : public Module {
 public:
  explicit EfficientNet(const EfficientNetOptions& options);
  Tensor forward(const Tensor& x) override;
  Sequential features, classifier;
};

std::shared_ptr<EfficientNet> efficientnet_b0(const EfficientNetOptions& options = {});

}  // namespace nabla::nn::models
