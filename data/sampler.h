// Public header. Samplers: which dataset indices an epoch visits, and in what order.
//
// A sampler is a pure function of the epoch: indices_for_epoch(e) gives the same list every time
// for the same seed, so a run is reproducible and a resumed run sees the same order. set_epoch()
// and indices() are the PyTorch-style spelling of the same thing.
//
//   SequentialSampler   0, 1, ..., n-1
//   RandomSampler       a permutation of [0, n), drawn from (seed, epoch)
//   DistributedSampler  rank r of w takes every w-th index of the (shuffled) list, after padding
//                       it to a multiple of w (or dropping the tail with drop_last)
#pragma once

#include <cstdint>
#include <vector>

namespace nabla::data {

class Sampler {
 public:
  virtual ~Sampler() = default;
  // How many indices one epoch yields.
  virtual int64_t size() const = 0;
  virtual std::vector<int64_t> indices_for_epoch(int64_t epoch) const = 0;

  void set_epoch(int64_t epoch) { epoch_ = epoch; }
  int64_t epoch() const { return epoch_; }
  std::vector<int64_t> indices() const { return indices_for_epoch(epoch_); }

 private:
  int64_t epoch_ = 0;
};

class SequentialSampler final : public Sampler {
 public:
  explicit SequentialSampler(int64_t dataset_size);
  int64_t size() const override { return size_; }
  std::vector<int64_t> indices_for_epoch(int64_t epoch) const override;

 private:
  int64_t size_;
};

class RandomSampler final : public Sampler {
 public:
  RandomSampler(int64_t dataset_size, uint64_t seed);
  int64_t size() const override { return size_; }
  std::vector<int64_t> indices_for_epoch(int64_t epoch) const override;

 private:
  int64_t size_;
  uint64_t seed_;
};

struct DistributedSamplerOptions {
  int64_t rank = 0;
  int64_t world_size = 1;
  bool shuffle = true;
  uint64_t seed = 0;  // must be the same on every rank, so that the shards are disjoint
  // false: pad with indices from the start of the list so every rank gets ceil(n / world) of
  // them (a few samples are seen twice). true: drop the tail so every rank gets floor(n / world).
  bool drop_last = false;
};

class DistributedSampler final : public Sampler {
 public:
  DistributedSampler(int64_t dataset_size, DistributedSamplerOptions options);
  int64_t size() const override { return per_rank_; }
  std::vector<int64_t> indices_for_epoch(int64_t epoch) const override;

 private:
  int64_t dataset_size_;
  DistributedSamplerOptions options_;
  int64_t per_rank_;
};

// A permutation of [0, n) that depends only on (seed, epoch): Fisher-Yates over a Philox stream.
std::vector<int64_t> random_permutation(int64_t n, uint64_t seed, int64_t epoch);

}  // namespace nabla::data
