// The small reference CNN (TARGETS.md's Fashion-MNIST model).
#include "nabla/nn/models/small_cnn.h"

#include "nabla/core/error.h"
#include "nabla/ops/elementwise.h"

namespace nabla::nn::models {

namespace {

int64_t checked_flat_features(const SmallCnnOptions& options) {
  NABLA_CHECK(
      options.image_size > 0 && options.image_size % 4 == 0 && options.in_channels > 0 &&
          options.num_classes > 0,
      "SmallCnn: image_size ({}) must be a positive multiple of 4, in_channels ({}) and num_classes ({}) > 0",
      options.image_size, options.in_channels, options.num_classes);
  int64_t side = options.image_size / 4;
  return 64 * side * side;
}

}  // namespace

SmallCnn::SmallCnn(const SmallCnnOptions& options)
    : conv1({.in = options.in_channels, .out = 32, .kernel = 3, .padding = 1, .bias = false}),
      bn1(32),
      conv2({.in = 32, .out = 64, .kernel = 3, .padding = 1, .bias = false}),
      bn2(64),
      pool({.kernel = 2}),
      fc1({.in = checked_flat_features(options), .out = 128}),
      fc2({.in = 128, .out = options.num_classes}),
      options_(options) {
  register_modules({{"conv1", conv1},
                    {"bn1", bn1},
                    {"conv2", conv2},
                    {"bn2", bn2},
                    {"pool", pool},
                    {"fc1", fc1},
                    {"fc2", fc2}});
}

Tensor SmallCnn::forward(const Tensor& x) {
  NABLA_CHECK(x.dim() == 4 && x.size(1) == options_.in_channels && x.size(2) == options_.image_size &&
                  x.size(3) == options_.image_size,
              "SmallCnn: expected input (N, {}, {}, {}), got {}", options_.in_channels, options_.image_size,
              options_.image_size, describe(x));
  Tensor y = pool(relu(bn1(conv1(x))));
  y = pool(relu(bn2(conv2(y))));
  return fc2(relu(fc1(y.flatten(1))));
}

}  // namespace nabla::nn::models
