// Public header. CifarDataset: the CIFAR-10 and CIFAR-100 binary formats.
//
// Each record is the label byte(s) then 3072 pixel bytes: 1024 red, 1024 green, 1024 blue, each a
// 32 x 32 image in row-major order. CIFAR-10 records have one label (0-9); CIFAR-100 records have
// a coarse (0-19) then a fine (0-99) label. Images come out HWC like every ImageDataset.
//
//   auto train = nabla::data::CifarDataset::open("cifar-10-batches-bin", /*train=*/true);
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "nabla/data/dataset.h"

namespace nabla::data {

enum class CifarVariant { cifar10, cifar100 };

struct CifarOptions {
  CifarVariant variant = CifarVariant::cifar10;
  bool fine_labels = true;  // CIFAR-100: the 100 fine classes (true) or the 20 coarse ones
};

class CifarDataset final : public ImageDataset {
 public:
  static constexpr int64_t kSide = 32;
  static constexpr int64_t kImageBytes = 3 * kSide * kSide;

  CifarDataset(const std::vector<std::string>& files, CifarOptions options = {});
  // One file's bytes already in memory; `name` stands for the file in errors and describe().
  static std::shared_ptr<CifarDataset> parse(std::span<const uint8_t> bytes, const std::string& name,
                                             CifarOptions options = {});
  // The standard file names in `root`: data_batch_1..5.bin / test_batch.bin (CIFAR-10),
  // train.bin / test.bin (CIFAR-100).
  static std::shared_ptr<CifarDataset> open(const std::string& root, bool train, CifarOptions options = {});

  int64_t size() const override { return static_cast<int64_t>(labels_.size()); }
  ImageShape image_shape() const override { return {.height = kSide, .width = kSide, .channels = 3}; }
  int64_t num_classes() const override;
  int64_t load_into(int64_t index, std::span<uint8_t> pixels, const SampleContext& context) override;
  std::string describe(int64_t index) const override;

 private:
  explicit CifarDataset(CifarOptions options) : options_(options) {}
  void append_file(std::span<const uint8_t> bytes, const std::string& name);

  CifarOptions options_;
  std::vector<std::string> files_;
  std::vector<int64_t> file_starts_;  // first index of each file
  std::vector<uint8_t> planes_;       // (N, 3, 32, 32) as stored
  std::vector<uint8_t> labels_;
};

}  // namespace nabla::data
