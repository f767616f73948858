// Public header. SyntheticDataset: ImageNet-shaped random uint8 images and labels, for measuring
// the loader and the training step without any files or decoding.
//
// A pool of `distinct_images` random images is generated once at construction (ImageNet's 1.28M
// images of 224 x 224 x 3 would be 190 GB); sample i is a copy of one pool image and a label,
// both a pure function of (seed, i). So the dataset is deterministic for a seed, and load_into
// costs one memcpy, which is what a benchmark of the loader's own overhead wants.
#pragma once

#include <cstdint>
#include <vector>

#include "nabla/data/dataset.h"

namespace nabla::data {

struct SyntheticOptions {
  int64_t size = 1281167;  // ImageNet-1k's training set
  ImageShape shape = {.height = 224, .width = 224, .channels = 3};
  int64_t num_classes = 1000;
  uint64_t seed = 0;
  int64_t distinct_images = 64;
};

class SyntheticDataset final : public ImageDataset {
 public:
  explicit SyntheticDataset(SyntheticOptions options = {});

  int64_t size() const override { return options_.size; }
  ImageShape image_shape() const override { return options_.shape; }
  int64_t num_classes() const override { return options_.num_classes; }
  int64_t load_into(int64_t index, std::span<uint8_t> pixels, const SampleContext& context) override;
  std::string describe(int64_t index) const override { return "synthetic[" + std::to_string(index) + "]"; }

  // Which pool image, and which label, sample `index` gets.
  int64_t pool_index(int64_t index) const;
  int64_t label(int64_t index) const;
  const uint8_t* pool_image(int64_t pool_index) const;

 private:
  SyntheticOptions options_;
  std::vector<uint8_t> pool_;  // (distinct_images, H, W, C)
};

}  // namespace nabla::data
