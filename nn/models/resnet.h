// Public header. ResNet-18/34/50/101/152 (v1.5: the stride sits on the bottleneck's 3x3 conv),
// with torchvision's module names, so state dicts match key for key ("layer1.0.downsample.1.weight").
//
//   auto model = nabla::nn::models::resnet50({.num_classes = 1000});
//   model->to(nabla::Device::cuda(0), nabla::MemoryFormat::ChannelsLast);
//   auto logits = model->forward(images);   // (N, in_channels, H, W) -> (N, num_classes)
#pragma once

#include <array>
#include <memory>
#include <string>

#include "nabla/nn/containers.h"
#include "nabla/nn/layers.h"

namespace nabla::nn::models {

struct ResNetOptions {
  int64_t num_classes = 1000;
  bool zero_init_residual = false;  // start each block's last BN weight at 0 (the block as identity)
  int64_t in_channels = 3;
  bool small_input_stem = false;  // CIFAR-style stem: 3x3 stride-1 conv1 and no max-pool
  // Gradient checkpointing while training: the stem layers and the blocks, split into this many
  // segments (nn::checkpoint_sequential). 0: off. Activations then cost about 1/segments.
  int checkpoint_segments = 0;
};

// Two 3x3 convs (ResNet-18/34).
class BasicBlock : public Module {
 public:
  static constexpr int64_t kExpansion = 1;
  BasicBlock(int64_t in_planes, int64_t planes, int64_t stride);
  Tensor forward(const Tensor& x) override;

  Conv2d conv1;
  BatchNorm2d bn1;
  ReLU relu;
  Conv2d conv2;
  BatchNorm2d bn2;
  std::shared_ptr<Sequential> downsample;  // 1x1 conv + BN when the shape changes, else null
};

// 1x1 reduce, 3x3 (strided), 1x1 expand by 4 (ResNet-50/101/152).
class Bottleneck : public Module {
 public:
  static constexpr int64_t kExpansion = 4;
  Bottleneck(int64_t in_planes, int64_t planes, int64_t stride);
  Tensor forward(const Tensor& x) override;

  Conv2d conv1;
  BatchNorm2d bn1;
  Conv2d conv2;
  BatchNorm2d bn2;
  Conv2d conv3;
  BatchNorm2d bn3;
  ReLU relu;
  std::shared_ptr<Sequential> downsample;
};

enum class BlockKind { basic, bottleneck };

class ResNet : public Module {
 public:
  // blocks_per_stage: e.g. {3, 4, 6, 3} for ResNet-50.
  ResNet(BlockKind kind, std::array<int64_t, 4> blocks_per_stage, const ResNetOptions& options = {});
  Tensor forward(const Tensor& x) override;
  // The pooled features before fc: (N, 512 * expansion).
  Tensor features(const Tensor& x);
  // Inference: folds every BatchNorm2d into the convolution before it (nn::fold_batch_norm), so
  // each convolution with its bias, ReLU and residual sum runs as one call on CUDA. Needs eval
  // mode; the model is for inference from then on (state_dict() gives the folded weights).
  void fuse_for_inference();
  void set_checkpoint_segments(int segments);

  Conv2d conv1;
  BatchNorm2d bn1;
  ReLU relu;
  MaxPool2d maxpool;
  Sequential layer1, layer2, layer3, layer4;
  AdaptiveAvgPool2d avgpool;
  Linear fc;

 private:
  // bn1 and the ReLU as one layer of a checkpointed forward (see features()).
  class StemBatchNormRelu;
  ResNetOptions options_;
  std::shared_ptr<StemBatchNormRelu> checkpoint_stem_;
};

std::shared_ptr<ResNet> resnet18(const ResNetOptions& options = {});
std::shared_ptr<ResNet> resnet34(const ResNetOptions& options = {});
std::shared_ptr<ResNet> resnet50(const ResNetOptions& options = {});
std::shared_ptr<ResNet> resnet101(const ResNetOptions& options = {});
std::shared_ptr<ResNet> resnet152(const ResNetOptions& options = {});

// The ResNet named "resnet18", "resnet34", "resnet50", "resnet101" or "resnet152" (command lines
// and configs pick one by name); any other name is an error that lists these.
std::shared_ptr<ResNet> resnet(const std::string& name, const ResNetOptions& options = {});

}  // namespace nabla::nn::models
