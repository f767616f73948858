// Public header. The small reference CNN for Fashion-MNIST (shared/design/TARGETS.md):
// conv32-bn-relu-pool, conv64-bn-relu-pool, fc128-relu, fc10.
//
//   nabla::nn::models::SmallCnn model;             // (N, 1, 28, 28) -> (N, 10)
//   nabla::nn::models::SmallCnn tiny({.image_size = 12, .num_classes = 4});
#pragma once

#include "nabla/nn/layers.h"

namespace nabla::nn::models {

struct SmallCnnOptions {
  int64_t in_channels = 1;
  int64_t image_size = 28;  // square input; a multiple of 4 (two 2x2 pools)
  int64_t num_classes = 10;
};

class SmallCnn : public Module {
 public:
  explicit SmallCnn(const SmallCnnOptions& options = {});
  Tensor forward(const Tensor& x) override;

  Conv2d conv1;
  BatchNorm2d bn1;
  Conv2d conv2;
  BatchNorm2d bn2;
  MaxPool2d pool;
  Linear fc1, fc2;

 private:
  SmallCnnOptions options_;
};

}  // namespace nabla::nn::models
