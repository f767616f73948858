// --batch-size auto (find_batch_size): against a brute-force scan on synthetic thresholds, and on
// CPU with a real training step under set_cpu_memory_limit.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <set>

#include "nabla/apps/train_support/batch_size_finder.h"
#include "nabla/core/logging.h"
#include "tiny_mlp.h"

namespace nabla::train_support {
namespace {

using namespace nabla::testing;

struct LimitGuard {
  ~LimitGuard() { set_cpu_memory_limit(0); }
};

// A trial that "runs out of memory" above `threshold` samples.
auto fits_up_to(int64_t threshold) {
  return [threshold](int64_t batch) {
    if (batch > threshold) throw OutOfMemoryError(fmt::format("simulated: batch {} > {}", batch, threshold));
  };
}

// The reference: the largest candidate batch <= max_batch that is <= threshold, by scanning.
int64_t brute_force(int64_t threshold, int64_t max_batch) {
  int64_t best = 0;
  for (int64_t b = 1; b <= max_batch; ++b) {
    if (b <= threshold && (b < 8 || b % 8 == 0)) best = b;
  }
  return best;
}

TEST(BatchSizeFinder, CandidatesAreOneToSevenThenMultiplesOfEight) {
  std::vector<int64_t> candidates;
  for (int64_t b = -1; b <= 40; ++b) {
    if (is_batch_size_candidate(b)) candidates.push_back(b);
  }
  EXPECT_EQ(candidates, (std::vector<int64_t>{1, 2, 3, 4, 5, 6, 7, 8, 16, 24, 32, 40}));
}

TEST(BatchSizeFinder, FindsTheLargestFittingCandidateLikeABruteForceScan) {
  std::mt19937_64 rng(test_seed());
  // 300 searches would print 300 "batch size auto" lines; keep the test output readable.
  struct QuietLog {
    spdlog::level::level_enum saved = logger().level();
    QuietLog() { logger().set_level(spdlog::level::warn); }
    ~QuietLog() { logger().set_level(saved); }
  } quiet;
  for (int round = 0; round < 300; ++round) {
    const int64_t max_batch = 1 + static_cast<int64_t>(rng() % 3000);
    const int64_t threshold = 1 + static_cast<int64_t>(rng() % 4000);
    const int64_t start = 1 + static_cast<int64_t>(rng() % 64);
    BatchSizeSearch found = find_batch_size(fits_up_to(threshold), {.max_batch = max_batch, .start = start});
    const int64_t expected = brute_force(threshold, max_batch);
    ASSERT_EQ(found.batch, expected) << "threshold " << threshold << ", max " << max_batch << ", start "
                                     << start;
    EXPECT_EQ(found.hit_max, expected == brute_force(max_batch, max_batch));
    // Every trial is a candidate within bounds, none repeats, and there are O(log) of them.
    std::set<int64_t> seen;
    for (const auto& t : found.trials) {
      EXPECT_TRUE(is_batch_size_candidate(t.batch) && t.batch <= max_batch) << t.batch;
      EXPECT_EQ(t.fits, t.batch <= threshold) << t.batch;
      EXPECT_TRUE(seen.insert(t.batch).second) << "batch " << t.batch << " tried twice";
    }
    EXPECT_LE(found.trials.size(), static_cast<size_t>(2 * std::log2(static_cast<double>(max_batch)) + 6));
  }
}

TEST(BatchSizeFinder, DoublesThenBisects) {
  BatchSizeSearch found = find_batch_size(fits_up_to(100), {.max_batch = 1000});
  std::vector<std::pair<int64_t, bool>> trials;
  for (const auto& t : found.trials) trials.emplace_back(t.batch, t.fits);
  // 1..64 fit, 128 does not; then between candidates 64 and 128: 96 fits, 112 no, 104 no.
  EXPECT_EQ(trials, (std::vector<std::pair<int64_t, bool>>{{1, true},
                                                           {2, true},
                                                           {4, true},
                                                           {8, true},
                                                           {16, true},
                                                           {32, true},
                                                           {64, true},
                                                           {128, false},
                                                           {96, true},
                                                           {112, false},
                                                           {104, false}}));
  EXPECT_EQ(found.batch, 96);
  EXPECT_NE(found.report().find("batch size auto: 96"), std::string::npos) << found.report();
  EXPECT_NE(found.report().find("128 OOM"), std::string::npos) << found.report();
}

TEST(BatchSizeFinder, NothingFitsIsAClearOutOfMemoryError) {
  try {
    find_batch_size(fits_up_to(0), {.max_batch = 64, .start = 16});
    ADD_FAILURE() << "expected OutOfMemoryError";
  } catch (const OutOfMemoryError& e) {
    EXPECT_NE(std::string(e.what()).find("not even a batch of 1 fits"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("simulated: batch 1 > 0"), std::string::npos) << e.what();
  }
}

TEST(BatchSizeFinder, OtherErrorsPassThroughAndBadOptionsAreRejected) {
  auto broken = [](int64_t batch) { NABLA_CHECK(batch < 4, "trial: broken model at batch {}", batch); };
  EXPECT_NABLA_ERROR(find_batch_size(broken, {.max_batch = 64}), "broken model at batch 4");
  EXPECT_NABLA_ERROR(find_batch_size(fits_up_to(5), {}), "max_batch must be at least 1, got 0");
  EXPECT_NABLA_ERROR(find_batch_size(fits_up_to(5), {.max_batch = 8, .start = 0}),
                     "start must be at least 1");
  EXPECT_NABLA_ERROR(find_batch_size(nullptr, {.max_batch = 8}), "expected a trial function");
}

// A real training step (forward, backward, SGD step) under a real CPU limit.
TEST(BatchSizeFinder, OnARealModelTheFoundBatchFitsAndTheNextCandidateDoesNot) {
  const uint64_t seed = test_seed();
  auto model = make_tiny_mlp(seed);
  optim::SGD opt(model->parameters(), {.lr = 0.01});
  auto trial = [&](int64_t batch) {
    MlpBatch data = random_mlp_batch(batch, seed + static_cast<uint64_t>(batch));
    opt.zero_grad();
    mlp_forward_backward(*model, data.input, data.target);
    opt.step();
    opt.zero_grad();
  };
  // Room for a step of about 100 samples, beyond what is held now (the data is made inside the
  // trial, so it counts too: a real loader's batch lives on the device as well).
  const size_t budget = mlp_step_extra_bytes(100) + 100 * (kMlpIn + kMlpOut) * sizeof(float);
  LimitGuard guard;
  set_cpu_memory_limit(cpu_memory_allocated() + budget);
  BatchSizeSearch found = find_batch_size(trial, {.max_batch = 4096});
  EXPECT_GE(found.batch, 64);
  EXPECT_LE(found.batch, 104);
  EXPECT_FALSE(found.hit_max);
  EXPECT_NO_THROW(trial(found.batch));
  const int64_t next = found.batch < 8 ? found.batch + 1 : found.batch + 8;
  EXPECT_THROW(trial(next), OutOfMemoryError);
}

}  // namespace
}  // namespace nabla::train_support
