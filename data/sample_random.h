// Public header. SampleRandom: the random numbers one sample's augmentation draws.
//
// The stream is a pure function of (seed, epoch, index), so a sample is augmented the same way
// whichever worker thread loads it and in whatever order, and a run is reproducible for a seed.
#pragma once

#include <cstdint>

#include "nabla/core/philox.h"
#include "nabla/data/dataset.h"

namespace nabla::data {

class SampleRandom {
 public:
  explicit SampleRandom(const SampleContext& context)
      : key_(mix(context.seed, static_cast<uint64_t>(context.epoch))),
        counter_(static_cast<uint64_t>(context.index) << 32) {}

  // Uniform in [0, 1), 53 random bits.
  double uniform() {
    if (used_ >= 4) refill();
    uint32_t hi = block_.v[used_ & 3];
    uint32_t lo = block_.v[(used_ + 1) & 3];
    used_ += 2;
    return philox::to_uniform_double(hi, lo);
  }
  double uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }
  // Uniform integer in [lo, hi], both ends included.
  int64_t integer(int64_t lo, int64_t hi) {
    auto span = static_cast<double>(hi - lo + 1);
    auto value = lo + static_cast<int64_t>(uniform() * span);
    return value > hi ? hi : value;
  }
  bool bernoulli(double p) { return uniform() < p; }

 private:
  // splitmix64 finalizer: spreads (seed, epoch) into an unrelated 64-bit Philox key.
  static uint64_t mix(uint64_t seed, uint64_t epoch) {
    uint64_t z = seed + 0x9E3779B97F4A7C15ull * (epoch + 1);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  void refill() {
    block_ = philox::philox4x32_10(counter_++, key_);
    used_ = 0;
  }

  uint64_t key_;
  uint64_t counter_;  // index in the high 32 bits: 2^32 blocks per sample before streams meet
  philox::Block block_{};
  int used_ = 4;
};

}  // namespace nabla::data
