#include "nabla_bench/plain_resnet.h"

#include <array>
#include <vector>

#include "nabla/nabla.h"

namespace nabla::bench {

namespace {

nn::Conv2dOptions conv(int64_t in, int64_t out, int64_t kernel, int64_t stride = 1) {
  return {.in = in, .out = out, .kernel = kernel, .stride = stride, .padding = kernel / 2, .bias = false};
}

// torchvision's Bottleneck (ResNet v1.5: the stride on the 3x3).
struct Bottleneck : nn::Module {
  nn::Conv2d conv1, conv2, conv3;
  nn::BatchNorm2d bn1, bn2, bn3;
  std::shared_ptr<nn::Sequential> downsample;

  Bottleneck(int64_t in, int64_t width, int64_t stride)
      : conv1(conv(in, width, 1)),
        conv2(conv(width, width, 3, stride)),
        conv3(conv(width, width * 4, 1)),
        bn1(width),
        bn2(width),
        bn3(width * 4) {
    register_modules(
        {{"conv1", conv1}, {"bn1", bn1}, {"conv2", conv2}, {"bn2", bn2}, {"conv3", conv3}, {"bn3", bn3}});
    if (stride != 1 || in != width * 4) {
      downsample = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
          std::make_shared<nn::Conv2d>(conv(in, width * 4, 1, stride)),
          std::make_shared<nn::BatchNorm2d>(width * 4)});
      register_module("downsample", *downsample);
    }
  }

  Tensor forward(const Tensor& x) override {
    Tensor out = relu(bn1(conv1(x)));
    out = relu(bn2(conv2(out)));
    out = bn3(conv3(out));
    return relu(out + (downsample ? (*downsample)(x) : x));
  }
};

struct PlainResNet : nn::Module {
  nn::Conv2d conv1;
  nn::BatchNorm2d bn1;
  nn::MaxPool2d maxpool;
  std::array<nn::Sequential, 4> layers;
  nn::AdaptiveAvgPool2d avgpool;
  nn::Linear fc;

  PlainResNet(const std::array<int, 4>& blocks, int64_t num_classes)
      : conv1({.in = 3, .out = 64, .kernel = 7, .stride = 2, .padding = 3, .bias = false}),
        bn1(64),
        maxpool({.kernel = 3, .stride = 2, .padding = 1}),
        avgpool(PoolPair{1, 1}),
        fc({.in = 2048, .out = num_classes}) {
    register_modules({{"conv1", conv1}, {"bn1", bn1}});
    int64_t in = 64;
    for (size_t l = 0; l < layers.size(); ++l) {
      const int64_t width = int64_t{64} << l;
      for (int b = 0; b < blocks[l]; ++b) {
        layers[l].emplace_back<Bottleneck>(in, width, b == 0 && l > 0 ? 2 : 1);
        in = width * 4;
      }
      register_module("layer" + std::to_string(l + 1), layers[l]);
    }
    register_module("fc", fc);
  }

  Tensor forward(const Tensor& x) override {
    Tensor y = maxpool(relu(bn1(conv1(x))));
    for (auto& layer : layers) y = layer(y);
    return fc(avgpool(y).flatten(1));
  }
};

}  // namespace

std::shared_ptr<nn::Module> plain_resnet(const std::string& arch, int64_t num_classes) {
  if (arch == "resnet50") return std::make_shared<PlainResNet>(std::array<int, 4>{3, 4, 6, 3}, num_classes);
  if (arch == "resnet101") return std::make_shared<PlainResNet>(std::array<int, 4>{3, 4, 23, 3}, num_classes);
  if (arch == "resnet152") return std::make_shared<PlainResNet>(std::array<int, 4>{3, 8, 36, 3}, num_classes);
  throw Error("--plain writes the bottleneck ResNets plainly: --arch resnet50, resnet101 or resnet152, not " +
              arch);
}

}  // namespace nabla::bench
