// Datasets for the loader tests: pixels and labels are a known function of (index, seed, epoch),
// so a test can recompute what every row of every batch must hold; optional per-sample delays
// make workers finish out of order; chosen indices fail.
#pragma once

#include <atomic>
#include <chrono>
#include <filesystem>
#include <functional>
#include <set>
#include <stdexcept>
#include <thread>

#include "nabla/data/dataset.h"
#include "nabla/data/error.h"
#include "nabla/data/sample_random.h"

namespace nabla::data::fakes {

class FakeImages : public ImageDataset {
 public:
  explicit FakeImages(int64_t n, std::set<int64_t> bad = {}) : n_(n), bad_(std::move(bad)) {}

  int64_t size() const override { return n_; }
  ImageShape image_shape() const override { return {.height = 4, .width = 3, .channels = 2}; }
  int64_t num_classes() const override { return 10; }
  std::string describe(int64_t index) const override { return "fake/" + std::to_string(index) + ".jpg"; }

  // The bytes sample `index` must hold: a pattern of the index plus one augmentation draw.
  static std::vector<uint8_t> expected_pixels(int64_t index, const SampleContext& context) {
    SampleRandom random(context);
    auto jitter = static_cast<uint8_t>(random.integer(0, 255));
    std::vector<uint8_t> out(24);
    for (size_t k = 0; k < out.size(); ++k) out[k] = static_cast<uint8_t>(index * 31 + k * 7 + 1) ^ jitter;
    return out;
  }
  static int64_t expected_label(int64_t index) { return (index * 7) % 10; }

  int64_t load_into(int64_t index, std::span<uint8_t> pixels, const SampleContext& context) override {
    ++loads;
    int64_t seen = max_index.load();
    while (index > seen && !max_index.compare_exchange_weak(seen, index)) {
    }
    if (delay) delay(index);
    if (bad_.count(index)) {
      if (throw_plain) throw std::runtime_error("plain failure");
      throw DataError(index, describe(index), "corrupt JPEG data");
    }
    auto want = expected_pixels(index, context);
    std::copy(want.begin(), want.end(), pixels.begin());
    return expected_label(index);
  }

  std::atomic<int64_t> loads{0};
  std::atomic<int64_t> max_index{-1};
  std::function<void(int64_t)> delay;  // called in the worker before loading
  bool throw_plain = false;            // fail with std::runtime_error instead of DataError

 private:
  int64_t n_;
  std::set<int64_t> bad_;
};

// Delays so that later indices often finish before earlier ones.
inline std::function<void(int64_t)> scrambled_delays() {
  return
      [](int64_t index) { std::this_thread::sleep_for(std::chrono::microseconds((index * 7919) % 5 * 300)); };
}

// A non-image dataset: input (3) float32 = index + {0.5, 1.5, 2.5}, target () int64 = index * 3.
class FakeVectors : public Dataset {
 public:
  explicit FakeVectors(int64_t n) : n_(n) {}
  int64_t size() const override { return n_; }
  Example get(int64_t index, const SampleContext&) override {
    Tensor input = Tensor::empty({3}, {.dtype = kFloat32});
    for (int k = 0; k < 3; ++k)
      input.data_ptr<float>()[k] = static_cast<float>(index) + 0.5f + static_cast<float>(k);
    Tensor target = Tensor::empty({}, {.dtype = kInt64});
    *target.data_ptr<int64_t>() = index * 3;
    return {.input = input, .target = target};
  }
  using Dataset::get;

 private:
  int64_t n_;
};

// Threads of this process now (Linux), to check that a loader leaves none behind.
inline int thread_count() {
  int count = 0;
  for ([[maybe_unused]] auto& entry : std::filesystem::directory_iterator("/proc/self/task")) ++count;
  return count;
}

}  // namespace nabla::data::fakes
