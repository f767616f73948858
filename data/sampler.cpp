// Samplers (see sampler.h). The permutation draws from Philox keyed by (seed, epoch) with its own
// domain constant, so it never shares a stream with the per-sample augmentation (SampleRandom).
#include "nabla/data/sampler.h"

#include <numeric>
#include <utility>

#include "nabla/core/error.h"
#include "nabla/core/philox.h"

namespace nabla::data {

namespace {

uint64_t splitmix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// 64 random bits at a time from one Philox stream.
class PermutationStream {
 public:
  PermutationStream(uint64_t seed, int64_t epoch)
      : key_(splitmix(splitmix(seed ^ 0x5A3D1E5Eull) + static_cast<uint64_t>(epoch))) {}
  uint64_t next() {
    if (used_ >= 2) {
      block_ = philox::philox4x32_10(counter_++, key_);
      used_ = 0;
    }
    uint64_t value = (uint64_t{block_.v[2 * used_]} << 32) | block_.v[2 * used_ + 1];
    ++used_;
    return value;
  }
  // Uniform in [0, bound) by rejection, so no index is favoured.
  uint64_t below(uint64_t bound) {
    uint64_t limit = UINT64_MAX - UINT64_MAX % bound;
    uint64_t value = next();
    while (value >= limit) value = next();
    return value % bound;
  }

 private:
  uint64_t key_;
  uint64_t counter_ = 0;
  philox::Block block_{};
  int used_ = 2;
};

void check_size(int64_t dataset_size, const char* who) {
  NABLA_CHECK(dataset_size >= 0, "{}: dataset size must be >= 0, got {}", who, dataset_size);
}

}  // namespace

std::vector<int64_t> random_permutation(int64_t n, uint64_t seed, int64_t epoch) {
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), int64_t{0});
  PermutationStream stream(seed, epoch);
  for (int64_t i = n - 1; i > 0; --i) {
    auto j = static_cast<int64_t>(stream.below(static_cast<uint64_t>(i) + 1));
    std::swap(order[static_cast<size_t>(i)], order[static_cast<size_t>(j)]);
  }
  return order;
}

SequentialSampler::SequentialSampler(int64_t dataset_size) : size_(dataset_size) {
  check_size(dataset_size, "SequentialSampler");
}

std::vector<int64_t> SequentialSampler::indices_for_epoch(int64_t) const {
  std::vector<int64_t> order(static_cast<size_t>(size_));
  std::iota(order.begin(), order.end(), int64_t{0});
  return order;
}

RandomSampler::RandomSampler(int64_t dataset_size, uint64_t seed) : size_(dataset_size), seed_(seed) {
  check_size(dataset_size, "RandomSampler");
}

std::vector<int64_t> RandomSampler::indices_for_epoch(int64_t epoch) const {
  return random_permutation(size_, seed_, epoch);
}

DistributedSampler::DistributedSampler(int64_t dataset_size, DistributedSamplerOptions options)
    : dataset_size_(dataset_size), options_(options) {
  check_size(dataset_size, "DistributedSampler");
  NABLA_CHECK(options.world_size >= 1, "DistributedSampler: world_size must be >= 1, got {}",
              options.world_size);
  NABLA_CHECK(options.rank >= 0 && options.rank < options.world_size,
              "DistributedSampler: rank must be in [0, world_size={}), got {}", options.world_size,
              options.rank);
  const int64_t w = options.world_size;
  per_rank_ = options.drop_last ? dataset_size / w : (dataset_size + w - 1) / w;
  NABLA_CHECK(!options.drop_last || dataset_size == 0 || per_rank_ > 0,
              "DistributedSampler: drop_last with {} samples over {} ranks leaves no sample per rank",
              dataset_size, w);
}

std::vector<int64_t> DistributedSampler::indices_for_epoch(int64_t epoch) const {
  std::vector<int64_t> all;
  if (options_.shuffle) {
    all = random_permutation(dataset_size_, options_.seed, epoch);
  } else {
    all.resize(static_cast<size_t>(dataset_size_));
    std::iota(all.begin(), all.end(), int64_t{0});
  }
  const int64_t total = per_rank_ * options_.world_size;
  // Pad by cycling from the start (the list may be shorter than the padding when n < world).
  for (int64_t i = dataset_size_; i < total; ++i) all.push_back(all[static_cast<size_t>(i % dataset_size_)]);
  all.resize(static_cast<size_t>(total));
  std::vector<int64_t> mine;
  mine.reserve(static_cast<size_t>(per_rank_));
  for (int64_t i = options_.rank; i < total; i += options_.world_size)
    mine.push_back(all[static_cast<size_t>(i)]);
  return mine;
}

}  // namespace nabla::data
