// The training and validation sets nabla-train reads, chosen by --data, with the augmentation of
// each recipe: none for the small CNN on Fashion-MNIST (TARGETS.md), a random horizontal flip for
// ResNets on Fashion-MNIST, pad-4 random crop + flip for CIFAR-10, and torchvision's
// RandomResizedCrop + flip / Resize + CenterCrop for ImageNet folders.
#pragma once

#include <memory>
#include <vector>

#include "nabla/data/dataset.h"
#include "nabla_train/options.h"

namespace nabla::train {

struct TrainData {
  std::shared_ptr<data::ImageDataset> train;
  std::shared_ptr<data::ImageDataset> val;
  int64_t num_classes = 0;
  int64_t channels = 0;
  std::vector<float> mean;  // per channel, for data::normalize_images
  std::vector<float> stddev;
};

TrainData make_data(const TrainOptions& options, const Recipe& recipe);

// An ImageDataset wrapper for small fixed-size images: an optional zero-padded random crop (the
// CIFAR recipe: pad `pad` pixels, crop back to the original size) and a random horizontal flip,
// drawn from the sample's own random stream so a sample's augmentation never depends on which
// loader thread read it.
class CropFlipDataset final : public data::ImageDataset {
 public:
  CropFlipDataset(std::shared_ptr<data::ImageDataset> inner, int64_t pad, bool flip);
  int64_t size() const override { return inner_->size(); }
  data::ImageShape image_shape() const override { return inner_->image_shape(); }
  int64_t num_classes() const override { return inner_->num_classes(); }
  int64_t load_into(int64_t index, std::span<uint8_t> pixels, const data::SampleContext& context) override;
  std::string describe(int64_t index) const override { return inner_->describe(index); }

 private:
  std::shared_ptr<data::ImageDataset> inner_;
  int64_t pad_;
  bool flip_;
};

}  // namespace nabla::train
