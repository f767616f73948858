// ResNet v1.5 as torchvision builds it: the same modules, names, order and initialization.
#include "nabla/nn/models/resnet.h"

#include "nabla/core/autograd/grad_mode.h"
#include "nabla/core/error.h"
#include "nabla/nn/checkpoint.h"
#include "nabla/nn/init.h"

namespace nabla::nn::models {

namespace {

Conv2dOptions conv3x3(int64_t in, int64_t out, int64_t stride) {
  return {.in = in, .out = out, .kernel = 3, .stride = stride, .padding = 1, .bias = false};
}

Conv2dOptions conv1x1(int64_t in, int64_t out, int64_t stride = 1) {
  return {.in = in, .out = out, .kernel = 1, .stride = stride, .bias = false};
}

// torchvision adds a projection shortcut when the stride or the channel count changes.
std::shared_ptr<Sequential> make_downsample(int64_t in, int64_t out, int64_t stride) {
  if (stride == 1 && in == out) return nullptr;
  auto seq = std::make_shared<Sequential>();
  seq->emplace_back<Conv2d>(conv1x1(in, out, stride));
  seq->emplace_back<BatchNorm2d>(out);
  return seq;
}

// The block's shortcut: x, or the downsampling convolution and batch norm, whose batch norm takes
// its statistics from the convolution's sums in training (batch_norm_from_sums).
Tensor shortcut(Sequential* downsample, const Tensor& x) {
  if (!downsample) return x;
  if (downsample->size() != 2 || !downsample->is_training()) return downsample->forward(x);
  auto* conv = dynamic_cast<Conv2d*>(&(*downsample)[0]);
  auto* bn = dynamic_cast<BatchNorm2d*>(&(*downsample)[1]);
  if (!conv || !bn) return downsample->forward(x);
  ChannelSums sums;
  const Tensor y = conv_sums(*conv, x, &sums);
  return bn->forward_from_sums(y, sums);
}

}  // namespace

BasicBlock::BasicBlock(int64_t in_planes, int64_t planes, int64_t stride)
    : conv1(conv3x3(in_planes, planes, stride)),
      bn1(planes),
      relu({.inplace = true}),
      conv2(conv3x3(planes, planes, 1)),
      bn2(planes),
      downsample(make_downsample(in_planes, planes * kExpansion, stride)) {
  register_modules({{"conv1", conv1}, {"bn1", bn1}, {"relu", relu}, {"conv2", conv2}, {"bn2", bn2}});
  if (downsample) register_module("downsample", *downsample);
}

// In training, the convolutions and the batch norms between them run as conv_sums and
// forward_relu_conv, and the last batch norm (+ shortcut + ReLU) as forward_from_sums: on CUDA
// float16 channels_last no batch norm makes its own pass over its input for the statistics
// (Note [Convolution + batch norm fusion]). In eval, conv_bn_relu (one cuDNN call per layer once
// folded).
Tensor BasicBlock::forward(const Tensor& x) {
  if (!is_training())
    return conv_bn_relu(conv2, bn2, conv_bn_relu(conv1, bn1, x), downsample ? downsample->forward(x) : x);
  const Tensor identity = shortcut(downsample.get(), x);
  ChannelSums s1, s2;
  Tensor out = conv_sums(conv1, x, &s1);
  out = bn1.forward_relu_conv(out, s1, conv2, &s2);
  return bn2.forward_from_sums(out, s2, identity, /*relu=*/true);
}

Bottleneck::Bottleneck(int64_t in_planes, int64_t planes, int64_t stride)
    : conv1(conv1x1(in_planes, planes)),
      bn1(planes),
      conv2(conv3x3(planes, planes, stride)),
      bn2(planes),
      conv3(conv1x1(planes, planes * kExpansion)),
      bn3(planes * kExpansion),
      relu({.inplace = true}),
      downsample(make_downsample(in_planes, planes * kExpansion, stride)) {
  register_modules({{"conv1", conv1},
                    {"bn1", bn1},
                    {"conv2", conv2},
                    {"bn2", bn2},
                    {"conv3", conv3},
                    {"bn3", bn3},
                    {"relu", relu}});
  if (downsample) register_module("downsample", *downsample);
}

Tensor Bottleneck::forward(const Tensor& x) {
  if (!is_training()) {
    Tensor out = conv_bn_relu(conv1, bn1, x);
    out = conv_bn_relu(conv2, bn2, out);
    return conv_bn_relu(conv3, bn3, out, downsample ? downsample->forward(x) : x);
  }
  ChannelSums s1, s2, s3;
  Tensor out = conv_sums(conv1, x, &s1);
  out = bn1.forward_relu_conv(out, s1, conv2, &s2);
  out = bn2.forward_relu_conv(out, s2, conv3, &s3);
  // The shortcut after the main branch: its nodes then run before conv1's in backward, so conv1's
  // data gradient (a GEMM) finds the shortcut's gradient of x pending and accumulates into it
  // (autograd::take_pending_gradient) instead of an elementwise add of the two.
  return bn3.forward_from_sums(out, s3, shortcut(downsample.get(), x), /*relu=*/true);
}

// The stem's BatchNorm and ReLU as one layer of a checkpointed forward, so that it runs the same
// fused kernel as the plain forward (and the two give the same gradients). A member, not a local:
// the checkpointed segments call it again during backward.
class ResNet::StemBatchNormRelu : public Module {
 public:
  Tensor forward(const Tensor& x) override { return bn->forward_relu(x); }
  BatchNorm2d* bn = nullptr;
};

namespace {

template <typename Block>
void make_stage(Sequential& stage, int64_t& in_planes, int64_t planes, int64_t blocks, int64_t stride) {
  stage.emplace_back<Block>(in_planes, planes, stride);
  in_planes = planes * Block::kExpansion;
  for (int64_t i = 1; i < blocks; ++i) stage.emplace_back<Block>(in_planes, planes, 1);
}

int64_t expansion(BlockKind kind) {
  return kind == BlockKind::basic ? BasicBlock::kExpansion : Bottleneck::kExpansion;
}

}  // namespace

ResNet::ResNet(BlockKind kind, std::array<int64_t, 4> blocks_per_stage, const ResNetOptions& options)
    : conv1(options.small_input_stem ? conv3x3(options.in_channels, 64, 1)
                                     : Conv2dOptions{.in = options.in_channels,
                                                     .out = 64,
                                                     .kernel = 7,
                                                     .stride = 2,
                                                     .padding = 3,
                                                     .bias = false}),
      bn1(64),
      relu({.inplace = true}),
      maxpool({.kernel = 3, .stride = 2, .padding = 1}),
      avgpool({1, 1}),
      fc({.in = 512 * expansion(kind), .out = options.num_classes}),
      options_(options),
      checkpoint_stem_(std::make_shared<StemBatchNormRelu>()) {
  NABLA_CHECK(options.num_classes > 0 && options.in_channels > 0,
              "ResNet: num_classes ({}) and in_channels ({}) must be > 0", options.num_classes,
              options.in_channels);
  int64_t in_planes = 64;
  std::array<Sequential*, 4> stages{&layer1, &layer2, &layer3, &layer4};
  for (int s = 0; s < 4; ++s) {
    NABLA_CHECK(blocks_per_stage[s] > 0, "ResNet: every stage needs at least one block");
    int64_t planes = int64_t{64} << s;
    int64_t stride = s == 0 ? 1 : 2;
    if (kind == BlockKind::basic) {
      make_stage<BasicBlock>(*stages[s], in_planes, planes, blocks_per_stage[s], stride);
    } else {
      make_stage<Bottleneck>(*stages[s], in_planes, planes, blocks_per_stage[s], stride);
    }
  }
  register_modules({{"conv1", conv1},
                    {"bn1", bn1},
                    {"relu", relu},
                    {"maxpool", maxpool},
                    {"layer1", layer1},
                    {"layer2", layer2},
                    {"layer3", layer3},
                    {"layer4", layer4},
                    {"avgpool", avgpool},
                    {"fc", fc}});

  // torchvision's initialization: He normal (fan_out, relu) for convs, BN 1 and 0; fc keeps
  // Linear's default. Optionally the last BN of each block starts at 0.
  apply([](Module& m) {
    if (auto* conv = dynamic_cast<Conv2d*>(&m)) {
      init::kaiming_normal_(conv->weight,
                            {.mode = init::FanMode::fan_out, .nonlinearity = init::Nonlinearity::relu});
    } else if (auto* bn = dynamic_cast<BatchNorm2d*>(&m)) {
      init::ones_(bn->weight);
      init::zeros_(bn->bias);
    }
  });
  if (options.zero_init_residual) {
    apply([](Module& m) {
      if (auto* b = dynamic_cast<Bottleneck*>(&m)) init::zeros_(b->bn3.weight);
      if (auto* b = dynamic_cast<BasicBlock*>(&m)) init::zeros_(b->bn2.weight);
    });
  }
}

Tensor ResNet::features(const Tensor& x) {
  NABLA_CHECK(x.dim() == 4 && x.size(1) == options_.in_channels,
              "ResNet: expected input (N, {}, H, W), got {}", options_.in_channels, describe(x));
  Tensor y;
  if (options_.checkpoint_segments > 0 && is_training() && GradMode::is_enabled()) {
    // The stem's layers and every block, as one list split into segments.
    checkpoint_stem_->bn = &bn1;
    std::vector<Module*> modules{&conv1, checkpoint_stem_.get()};
    if (!options_.small_input_stem) modules.push_back(&maxpool);
    for (Sequential* stage : {&layer1, &layer2, &layer3, &layer4}) {
      for (size_t i = 0; i < stage->size(); ++i) modules.push_back(&(*stage)[i]);
    }
    y = checkpoint_sequential(modules, options_.checkpoint_segments, x);
  } else {
    y = conv_bn_relu(conv1, bn1, x);
    if (!options_.small_input_stem) y = maxpool(y);
    y = layer4(layer3(layer2(layer1(y))));
  }
  return avgpool(y).flatten(1);
}

void ResNet::fuse_for_inference() {
  NABLA_CHECK(!is_training(),
              "ResNet::fuse_for_inference: call model->eval() first (folding uses the running "
              "statistics of the batch norms)");
  fold_batch_norm(conv1, bn1);
  for (Sequential* stage : {&layer1, &layer2, &layer3, &layer4}) {
    for (size_t i = 0; i < stage->size(); ++i) {
      Module& block = (*stage)[i];
      std::shared_ptr<Sequential> downsample;
      if (auto* basic = dynamic_cast<BasicBlock*>(&block)) {
        fold_batch_norm(basic->conv1, basic->bn1);
        fold_batch_norm(basic->conv2, basic->bn2);
        downsample = basic->downsample;
      } else if (auto* bottleneck = dynamic_cast<Bottleneck*>(&block)) {
        fold_batch_norm(bottleneck->conv1, bottleneck->bn1);
        fold_batch_norm(bottleneck->conv2, bottleneck->bn2);
        fold_batch_norm(bottleneck->conv3, bottleneck->bn3);
        downsample = bottleneck->downsample;
      }
      if (downsample) {
        fold_batch_norm(dynamic_cast<Conv2d&>((*downsample)[0]),
                        dynamic_cast<BatchNorm2d&>((*downsample)[1]));
      }
    }
  }
}

void ResNet::set_checkpoint_segments(int segments) {
  NABLA_CHECK(segments >= 0, "ResNet: checkpoint segments must be >= 0 (0 turns checkpointing off), got {}",
              segments);
  options_.checkpoint_segments = segments;
}

Tensor ResNet::forward(const Tensor& x) {
  return fc(features(x));
}

std::shared_ptr<ResNet> resnet18(const ResNetOptions& options) {
  return std::make_shared<ResNet>(BlockKind::basic, std::array<int64_t, 4>{2, 2, 2, 2}, options);
}
std::shared_ptr<ResNet> resnet34(const ResNetOptions& options) {
  return std::make_shared<ResNet>(BlockKind::basic, std::array<int64_t, 4>{3, 4, 6, 3}, options);
}
std::shared_ptr<ResNet> resnet50(const ResNetOptions& options) {
  return std::make_shared<ResNet>(BlockKind::bottleneck, std::array<int64_t, 4>{3, 4, 6, 3}, options);
}
std::shared_ptr<ResNet> resnet101(const ResNetOptions& options) {
  return std::make_shared<ResNet>(BlockKind::bottleneck, std::array<int64_t, 4>{3, 4, 23, 3}, options);
}
std::shared_ptr<ResNet> resnet152(const ResNetOptions& options) {
  return std::make_shared<ResNet>(BlockKind::bottleneck, std::array<int64_t, 4>{3, 8, 36, 3}, options);
}

std::shared_ptr<ResNet> resnet(const std::string& name, const ResNetOptions& options) {
  if (name == "resnet18") return resnet18(options);
  if (name == "resnet34") return resnet34(options);
  if (name == "resnet50") return resnet50(options);
  if (name == "resnet101") return resnet101(options);
  if (name == "resnet152") return resnet152(options);
  NABLA_CHECK(false, "unknown ResNet '{}': expected resnet18, resnet34, resnet50, resnet101 or resnet152",
              name);
  __builtin_unreachable();
}

}  // namespace nabla::nn::models
