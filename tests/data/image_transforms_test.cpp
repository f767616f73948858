// Transforms against torchvision 0.14 (tensor path, bilinear, antialias=False: Note [Bilinear
// geometry] in data/image/transforms.h), RandomResizedCrop's sampling, flip and Normalize.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "data/image_test_util.h"
#include "nabla/data/image/transforms.h"
#include "test_util.h"

namespace nabla::data {
namespace {

using nabla::testing::byte_diff;

std::vector<uint8_t> random_image(int64_t height, int64_t width, uint64_t seed) {
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::vector<uint8_t> pixels(static_cast<size_t>(height * width * 3));
  for (auto& p : pixels) p = static_cast<uint8_t>(1 + rng() % 255);  // noise: every weight shows
  return pixels;
}

std::vector<uint8_t> resample(const std::vector<uint8_t>& image, int64_t height, int64_t width,
                              const ResampleMap& map, int64_t size, bool flip = false) {
  std::vector<uint8_t> out(static_cast<size_t>(size * size * 3));
  resample_bilinear(image, height, width, 3, map, out, size, size, flip);
  return out;
}

struct Job {
  std::string json;
  std::vector<uint8_t> ours;
};

// Runs every job through torchvision and expects each output within 1 of ours and almost all
// identical: the weights agree to float precision, but at exact halves (a weight of 0.5 on two
// pixels of odd sum, common for ratios like 1.6) float noise decides the rounding, so about 1%
// of the bytes may differ by one.
void expect_match_torchvision(const std::vector<uint8_t>& image, int64_t height, int64_t width,
                              std::vector<Job>& jobs) {
  std::vector<std::string> specs;
  specs.reserve(jobs.size());
  for (const auto& job : jobs) specs.push_back(job.json);
  auto expected = nabla::testing::torchvision_outputs(image, height, width, specs);
  for (size_t k = 0; k < jobs.size(); ++k) {
    auto diff = byte_diff(jobs[k].ours, expected[k]);
    EXPECT_LE(diff.max, 1) << "job " << jobs[k].json;
    EXPECT_LT(diff.mean, 0.02) << "job " << jobs[k].json;
  }
}

TEST(ImageTransforms, ResizedCropMatchesTorchvision) {
  NABLA_REQUIRE_TORCHVISION();
  const int64_t height = 97, width = 131;
  auto image = random_image(height, width, nabla::testing::test_seed());
  std::mt19937 rng(static_cast<uint32_t>(nabla::testing::test_seed() + 1));
  std::vector<CropBox> boxes = {
      {.top = 0, .left = 0, .height = height, .width = width},  // whole image, downscale
      {.top = 90, .left = 125, .height = 7, .width = 6},        // corner crop, strong upscale
      {.top = 3, .left = 1, .height = 50, .width = 17},         // anisotropic
  };
  for (int k = 0; k < 5; ++k) {  // random crops
    int64_t h = 1 + rng() % height, w = 1 + rng() % width;
    boxes.push_back({.top = int64_t(rng() % (height - h + 1)),
                     .left = int64_t(rng() % (width - w + 1)),
                     .height = h,
                     .width = w});
  }
  std::vector<Job> jobs;
  for (const auto& box : boxes) {
    for (int64_t size : {24, 64}) {
      jobs.push_back(
          {fmt::format(R"("kind": "resized_crop", "top": {}, "left": {}, "height": {}, "width": {}, )"
                       R"("size": {})",
                       box.top, box.left, box.height, box.width, size),
           resample(image, height, width, crop_resize_map(box, size, size), size)});
    }
  }
  expect_match_torchvision(image, height, width, jobs);
}

TEST(ImageTransforms, ResizeShorterSideThenCenterCropMatchesTorchvision) {
  NABLA_REQUIRE_TORCHVISION();
  // Every image's jobs go to torchvision in one Python process (its start-up costs seconds).
  std::vector<nabla::testing::TorchvisionJob> references;
  std::vector<std::vector<uint8_t>> ours;
  for (auto [height, width] : {std::pair<int64_t, int64_t>{75, 100}, {100, 75}, {64, 64}}) {
    auto image = random_image(height, width, nabla::testing::test_seed() + height);
    for (auto [resize, size] : {std::pair<int64_t, int64_t>{56, 48}, {90, 80}, {40, 40}}) {
      references.push_back(
          {image, height, width,
           fmt::format(R"("kind": "resize_center_crop", "resize": {}, "size": {})", resize, size)});
      ours.push_back(
          resample(image, height, width, resize_center_crop_map(height, width, resize, size, size), size));
    }
  }
  auto expected = nabla::testing::torchvision_outputs(references);
  ASSERT_EQ(expected.size(), references.size());
  for (size_t k = 0; k < references.size(); ++k) {  // the tolerances of expect_match_torchvision
    const std::string job =
        fmt::format("{}x{} image, {}", references[k].height, references[k].width, references[k].spec);
    auto diff = byte_diff(ours[k], expected[k]);
    EXPECT_LE(diff.max, 1) << job;
    EXPECT_LT(diff.mean, 0.02) << job;
  }
}

TEST(ImageTransforms, ResizedSizeFollowsTorchvisionTruncation) {
  int64_t h = 0, w = 0;
  resized_size(375, 500, 256, h, w);  // 256 * 500 / 375 = 341.33
  EXPECT_EQ(h, 256);
  EXPECT_EQ(w, 341);
  resized_size(500, 333, 256, h, w);  // 256 * 500 / 333 = 384.38
  EXPECT_EQ(h, 384);
  EXPECT_EQ(w, 256);
}

TEST(ImageTransforms, FlipMirrorsTheColumnsOfTheSameCrop) {
  const int64_t height = 40, width = 50, size = 16;
  auto image = random_image(height, width, nabla::testing::test_seed());
  auto map = crop_resize_map({.top = 5, .left = 7, .height = 30, .width = 33}, size, size);
  auto plain = resample(image, height, width, map, size);
  auto flipped = resample(image, height, width, map, size, /*flip=*/true);
  for (int64_t y = 0; y < size; ++y) {
    for (int64_t x = 0; x < size; ++x) {
      for (int64_t c = 0; c < 3; ++c) {
        ASSERT_EQ(flipped[(y * size + x) * 3 + c], plain[(y * size + size - 1 - x) * 3 + c]);
      }
    }
  }
}

TEST(ImageTransforms, ScaledMapSamplesTheSameContentAsFullSize) {
  // An image that is constant on 4x4 blocks, and its exact 1/4 reduction: sampling the reduction
  // through the scaled map must give the full-size result wherever the bilinear taps stay
  // inside one block (the reduction is the block average).
  const int64_t height = 96, width = 96, size = 11;
  auto blocks = random_image(height / 4, width / 4, nabla::testing::test_seed());
  std::vector<uint8_t> full(size_t(height * width * 3));
  for (int64_t y = 0; y < height; ++y)
    for (int64_t x = 0; x < width; ++x)
      for (int64_t c = 0; c < 3; ++c)
        full[(y * width + x) * 3 + c] = blocks[((y / 4) * (width / 4) + x / 4) * 3 + c];
  // Output pixel x samples full-size 2 + 8 (x + 0.5) - 0.5 = 5.5 + 8x: the middle of block
  // 1 + 2x, whose taps 5 + 8x and 6 + 8x lie in that block; at 1/4 scale that is pixel 1 + 2x.
  auto map = crop_resize_map({.top = 2, .left = 2, .height = 88, .width = 88}, size, size);
  auto reference = resample(full, height, width, map, size);
  ResampleMap quarter = {.y = map.y.scaled(0.25, height / 4), .x = map.x.scaled(0.25, width / 4)};
  auto scaled = resample(blocks, height / 4, width / 4, quarter, size);
  EXPECT_EQ(scaled, reference);
}

TEST(ImageTransforms, RandomResizedCropFallsBackToAClampedCenterCrop) {
  // Hand-computed: no try can fit a crop of at least 8% of the area with ratio in [3/4, 4/3]
  // into a 10-pixel side, so torchvision's fallback applies.
  SampleRandom random(SampleContext{.seed = nabla::testing::test_seed()});
  auto wide = random_resized_crop_box(10, 1000, {}, random);  // ratio 100 > 4/3: h = 10, w = round(13.33)
  EXPECT_EQ(wide.height, 10);
  EXPECT_EQ(wide.width, 13);
  EXPECT_EQ(wide.top, 0);
  EXPECT_EQ(wide.left, 493);                                  // (1000 - 13) // 2
  auto tall = random_resized_crop_box(1000, 10, {}, random);  // w = 10, h = round(10 / 0.75) = 13
  EXPECT_EQ(tall.height, 13);
  EXPECT_EQ(tall.width, 10);
  EXPECT_EQ(tall.top, 493);
  EXPECT_EQ(tall.left, 0);
}

TEST(ImageTransforms, RandomResizedCropStaysInsideTheImageAndItsRanges) {
  const int64_t height = 375, width = 500;
  double min_fraction = 1, max_fraction = 0, min_ratio = 10, max_ratio = 0;
  for (int64_t index = 0; index < 3000; ++index) {
    SampleRandom random(SampleContext{.seed = nabla::testing::test_seed(), .index = index});
    auto box = random_resized_crop_box(height, width, {}, random);
    ASSERT_GE(box.top, 0);
    ASSERT_GE(box.left, 0);
    ASSERT_LE(box.top + box.height, height);
    ASSERT_LE(box.left + box.width, width);
    double fraction = double(box.height * box.width) / double(height * width);
    double ratio = double(box.width) / double(box.height);
    min_fraction = std::min(min_fraction, fraction), max_fraction = std::max(max_fraction, fraction);
    min_ratio = std::min(min_ratio, ratio), max_ratio = std::max(max_ratio, ratio);
  }
  // Rounding w and h to whole pixels moves the area and the ratio by under 1%.
  EXPECT_GT(min_fraction, 0.08 * 0.98);
  EXPECT_LT(min_fraction, 0.10);  // 3000 draws reach near the bottom of the range
  EXPECT_GT(max_fraction, 0.90);
  EXPECT_GT(min_ratio, 0.75 * 0.98);
  EXPECT_LT(max_ratio, 4.0 / 3.0 * 1.02);
}

TEST(ImageTransforms, CropDrawsDependOnlyOnSeedEpochAndIndex) {
  auto box_for = [](uint64_t seed, int64_t epoch, int64_t index, int worker) {
    SampleRandom random(SampleContext{.seed = seed, .epoch = epoch, .index = index, .worker = worker});
    auto b = random_resized_crop_box(375, 500, {}, random);
    return std::tuple(b.top, b.left, b.height, b.width);
  };
  uint64_t seed = nabla::testing::test_seed();
  EXPECT_EQ(box_for(seed, 2, 17, 0), box_for(seed, 2, 17, 5));  // worker does not matter
  EXPECT_NE(box_for(seed, 2, 17, 0), box_for(seed, 3, 17, 0));  // epoch does
  EXPECT_NE(box_for(seed, 2, 17, 0), box_for(seed, 2, 18, 0));  // index does
  EXPECT_NE(box_for(seed, 2, 17, 0), box_for(seed + 1, 2, 17, 0));
}

TEST(ImageTransforms, NormalizeToChwMatchesTheFormula) {
  const int64_t height = 5, width = 7;
  auto image = random_image(height, width, nabla::testing::test_seed());
  std::vector<float> mean = {0.485f, 0.456f, 0.406f}, stdev = {0.229f, 0.224f, 0.225f};
  std::vector<float> out(size_t(height * width * 3));
  normalize_to_chw(image, height, width, 3, mean, stdev, out);
  for (int64_t c = 0; c < 3; ++c) {
    for (int64_t p = 0; p < height * width; ++p) {
      double expected = (image[size_t(p * 3 + c)] / 255.0 - mean[size_t(c)]) / stdev[size_t(c)];
      ASSERT_NEAR(out[size_t(c * height * width + p)], expected, 1e-5);
    }
  }
  std::vector<float> two = {0.5f, 0.5f};
  EXPECT_NABLA_ERROR(normalize_to_chw(image, height, width, 3, two, stdev, out), "one mean and one std");
}

}  // namespace
}  // namespace nabla::data
