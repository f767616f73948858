// Samplers: every epoch is a permutation, reproducible for (seed, epoch), different across
// epochs; the distributed shards cover the dataset exactly (drop_last) or with the documented
// padding, and agree with PyTorch's DistributedSampler arithmetic.
#include <algorithm>
#include <map>
#include <numeric>
#include <set>

#include "nabla/data/sampler.h"
#include "test_util.h"

namespace nabla::data {
namespace {

std::vector<int64_t> iota_vector(int64_t n) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), int64_t{0});
  return v;
}

TEST(Sampler, SequentialYieldsZeroToNMinusOne) {
  SequentialSampler sampler(7);
  EXPECT_EQ(sampler.size(), 7);
  EXPECT_EQ(sampler.indices_for_epoch(3), iota_vector(7));
}

TEST(Sampler, RandomIsAPermutationReproducibleForSeedAndEpoch) {
  const uint64_t seed = testing::test_seed();
  RandomSampler a(1000, seed), b(1000, seed);
  for (int64_t epoch = 0; epoch < 3; ++epoch) {
    auto order = a.indices_for_epoch(epoch);
    EXPECT_EQ(order, b.indices_for_epoch(epoch)) << "epoch " << epoch;
    auto sorted = order;
    std::sort(sorted.begin(), sorted.end());
    EXPECT_EQ(sorted, iota_vector(1000));
    EXPECT_NE(order, iota_vector(1000));
  }
  EXPECT_NE(a.indices_for_epoch(0), a.indices_for_epoch(1));
  EXPECT_NE(a.indices_for_epoch(0), RandomSampler(1000, seed + 1).indices_for_epoch(0));
  a.set_epoch(2);
  EXPECT_EQ(a.indices(), b.indices_for_epoch(2));
}

TEST(Sampler, RandomPermutationIsUniformOverFirstPosition) {
  // Each of 4 values should lead about 1/4 of 4000 permutations (a biased shuffle would not).
  std::map<int64_t, int> first;
  for (int64_t epoch = 0; epoch < 4000; ++epoch)
    ++first[random_permutation(4, testing::test_seed(), epoch)[0]];
  for (int64_t v = 0; v < 4; ++v) EXPECT_NEAR(first[v], 1000, 150) << "value " << v;
}

// The union of all ranks' indices for one epoch, and each rank's list.
std::vector<std::vector<int64_t>> shards(int64_t n, int64_t world, bool drop_last, bool shuffle,
                                         uint64_t seed, int64_t epoch) {
  std::vector<std::vector<int64_t>> out;
  for (int64_t rank = 0; rank < world; ++rank) {
    DistributedSampler s(
        n, {.rank = rank, .world_size = world, .shuffle = shuffle, .seed = seed, .drop_last = drop_last});
    out.push_back(s.indices_for_epoch(epoch));
    EXPECT_EQ(static_cast<int64_t>(out.back().size()), s.size());
  }
  return out;
}

TEST(Sampler, DistributedWithPaddingCoversEveryIndexAndPadsFromTheStart) {
  const uint64_t seed = testing::test_seed();
  for (int64_t n : {10, 11, 13, 3}) {
    const int64_t world = 4;
    auto parts = shards(n, world, /*drop_last=*/false, /*shuffle=*/true, seed, 1);
    const int64_t per_rank = (n + world - 1) / world;
    std::map<int64_t, int> seen;
    for (auto& p : parts) {
      EXPECT_EQ(static_cast<int64_t>(p.size()), per_rank);
      for (int64_t i : p) ++seen[i];
    }
    EXPECT_EQ(static_cast<int64_t>(seen.size()), n) << "every index appears";
    // The padding repeats the first (total - n) entries of the epoch's permutation.
    auto perm = random_permutation(n, seed, 1);
    std::map<int64_t, int> expected;
    for (int64_t i = 0; i < n; ++i) ++expected[i];
    for (int64_t i = n; i < per_rank * world; ++i) ++expected[perm[static_cast<size_t>(i % n)]];
    EXPECT_EQ(seen, expected) << "n=" << n;
  }
}

TEST(Sampler, DistributedWithDropLastIsDisjointAndDropsOnlyTheTail) {
  const uint64_t seed = testing::test_seed();
  const int64_t n = 103, world = 4;
  auto parts = shards(n, world, /*drop_last=*/true, /*shuffle=*/true, seed, 2);
  std::set<int64_t> seen;
  size_t total = 0;
  for (auto& p : parts) {
    EXPECT_EQ(p.size(), size_t{25});
    total += p.size();
    seen.insert(p.begin(), p.end());
  }
  EXPECT_EQ(seen.size(), total) << "no index on two ranks";
  // Exactly the first 100 entries of the permutation, dealt round-robin.
  auto perm = random_permutation(n, seed, 2);
  for (int64_t rank = 0; rank < world; ++rank)
    for (size_t k = 0; k < parts[rank].size(); ++k) EXPECT_EQ(parts[rank][k], perm[k * world + rank]);
}

TEST(Sampler, DistributedWithoutShuffleDealsRoundRobin) {
  auto parts = shards(10, 3, false, false, 0, 0);
  EXPECT_EQ(parts[0], (std::vector<int64_t>{0, 3, 6, 9}));
  EXPECT_EQ(parts[1], (std::vector<int64_t>{1, 4, 7, 0}));
  EXPECT_EQ(parts[2], (std::vector<int64_t>{2, 5, 8, 1}));
}

TEST(Sampler, DistributedRejectsBadRankAndWorld) {
  EXPECT_NABLA_ERROR(DistributedSampler(10, {.rank = 4, .world_size = 4}),
                     "rank must be in [0, world_size=4)");
  EXPECT_NABLA_ERROR(DistributedSampler(10, {.rank = 0, .world_size = 0}), "world_size must be >= 1");
  EXPECT_NABLA_ERROR(DistributedSampler(3, {.rank = 0, .world_size = 4, .drop_last = true}),
                     "leaves no sample");
}

}  // namespace
}  // namespace nabla::data
