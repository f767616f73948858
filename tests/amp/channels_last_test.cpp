// channels_last end to end on the CPU: a ResNet moved to channels_last and fed channels_last
// input keeps NHWC through forward and backward. The layout-conversion counter
// (nabla::debug::layout_conversions) proves it: no tensor changes memory format outside the CPU
// convolution's own NCHW staging (its im2col kernels are NCHW only; CUDA has none, see
// tests/amp/cuda/amp_test.cpp). Also checks the counter itself, on conversions made on purpose.
#include <gtest/gtest.h>

#include "test_util.h"

namespace nabla::testing {
namespace {

int64_t hidden_conversions() {
  const auto c = debug::layout_conversions();
  return c.total - c.cpu_conv_staging;
}

TEST(AmpChannelsLast, CounterCountsExactlyTheConversions) {
  const Tensor x = random_input({2, 3, 4, 5}, test_seed(), kFloat32);
  debug::reset_layout_conversions();
  const Tensor nhwc = x.contiguous(MemoryFormat::ChannelsLast);
  EXPECT_EQ(debug::layout_conversions().total, 1);
  EXPECT_TRUE(nhwc.contiguous(MemoryFormat::ChannelsLast).is_same(nhwc));  // already NHWC: no copy
  EXPECT_EQ(debug::layout_conversions().total, 1);
  const Tensor back = nhwc.contiguous();
  EXPECT_EQ(debug::layout_conversions().total, 2);
  EXPECT_TRUE(all_close(back, x, 0.0, 0.0));
  // A dtype change or a same-layout clone keeps the format: not a conversion.
  nhwc.to(kBFloat16);
  nhwc.clone();
  x.to(kFloat64);
  EXPECT_EQ(debug::layout_conversions().total, 2);
  // One channel is NCHW and NHWC at once: no data moves, and nothing is counted.
  const Tensor one = random_input({2, 1, 4, 5}, test_seed() + 1, kFloat32);
  const Tensor one_nhwc = one.contiguous(MemoryFormat::ChannelsLast);
  EXPECT_EQ(one_nhwc.strides(), channels_last_strides(one.sizes()));
  EXPECT_EQ(one_nhwc.data_ptr(), one.data_ptr());
  EXPECT_EQ(debug::layout_conversions().total, 2);
}

void run_resnet_step(bool bf16_autocast) {
  manual_seed(test_seed());
  // ResNet-18 with the CIFAR stem and one input channel, as for Fashion-MNIST.
  auto model = nn::models::resnet18({.num_classes = 10, .in_channels = 1, .small_input_stem = true});
  model->to(MemoryFormat::ChannelsLast);
  // The one-channel stem and the 1x1 kernels are NCHW and NHWC at once; they get NHWC's strides.
  EXPECT_EQ(model->conv1.weight.strides(), channels_last_strides(model->conv1.weight.sizes()));
  const Tensor x = random_input({2, 1, 16, 16}, test_seed(), kFloat32).contiguous(MemoryFormat::ChannelsLast);
  const Tensor labels = randint(0, 10, {2});
  debug::reset_layout_conversions();
  Tensor features, loss;
  {
    amp::Autocast autocast(Device::cpu(), kBFloat16, bf16_autocast);
    features = model->layer4.forward(model->layer3.forward(model->layer2.forward(
        model->layer1.forward(model->relu.forward(model->bn1.forward(model->conv1.forward(x)))))));
    loss = cross_entropy(model->forward(x), labels);
  }
  EXPECT_TRUE(features.is_contiguous(MemoryFormat::ChannelsLast));
  EXPECT_EQ(features.dtype(), bf16_autocast ? kBFloat16 : kFloat32);
  loss.backward();
  EXPECT_EQ(hidden_conversions(), 0) << "total " << debug::layout_conversions().total << ", CPU conv staging "
                                     << debug::layout_conversions().cpu_conv_staging;
  EXPECT_GT(debug::layout_conversions().cpu_conv_staging, 0);  // the counter did see the staging
  for (const auto& [name, p] : model->named_parameters()) {
    ASSERT_TRUE(p.grad().defined()) << name;
    EXPECT_EQ(p.grad().dtype(), kFloat32) << name;
    // NHWC (a 1-channel or 1x1 kernel is NCHW and NHWC at once, which passes too).
    if (p.dim() == 4) {
      EXPECT_TRUE(p.grad().is_contiguous(MemoryFormat::ChannelsLast)) << name;
    }
  }
}

TEST(AmpChannelsLast, ResNetStepMakesNoHiddenLayoutConversions) {
  run_resnet_step(false);
}

TEST(AmpChannelsLast, ResNetStepUnderBFloat16AutocastMakesNoHiddenLayoutConversions) {
  run_resnet_step(true);
}

TEST(AmpChannelsLast, AFlattenOfNhwcActivationsIsCounted) {
  // The negative control: SmallCnn flattens (N, 64, 3, 3) activations for its first linear
  // layer, which from channels_last needs an NCHW copy (as in PyTorch); the counter sees it.
  manual_seed(test_seed());
  nn::models::SmallCnn model({.image_size = 12, .num_classes = 4});
  model.to(MemoryFormat::ChannelsLast);
  const Tensor x = random_input({2, 1, 12, 12}, test_seed(), kFloat32).contiguous(MemoryFormat::ChannelsLast);
  debug::reset_layout_conversions();
  model.forward(x).sum().backward();
  EXPECT_GE(hidden_conversions(), 1);
}

}  // namespace
}  // namespace nabla::testing
