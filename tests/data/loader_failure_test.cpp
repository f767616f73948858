// DataLoader under stress: stopping mid-epoch or by destruction leaves no thread behind and does
// not hang; a worker's failure reaches the caller as a DataError naming the sample and file; with
// on_bad_sample=skip a bad sample is counted and replaced by the next index that loads.
#include <chrono>

#include "data/fake_datasets.h"
#include "nabla/core/cuda/runtime.h"
#include "nabla/data/data_loader.h"
#include "test_util.h"

namespace nabla::data {
namespace {

using fakes::FakeImages;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Threads now, after one small pass, so that threads a runtime starts lazily on first use (a
// sanitizer's, a logger's) are already there and only the loader's own could differ.
int settled_thread_count() {
  DataLoader warm(std::make_shared<FakeImages>(8), {.batch_size = 2, .num_workers = 2});
  for ([[maybe_unused]] auto& batch : warm) {
  }
  return fakes::thread_count();
}

std::shared_ptr<FakeImages> slow_images(int64_t n) {
  auto dataset = std::make_shared<FakeImages>(n);
  dataset->delay = [](int64_t) { std::this_thread::sleep_for(std::chrono::milliseconds(2)); };
  return dataset;
}

TEST(DataLoaderShutdown, BreakingMidEpochThenStartingAgainWorks) {
  const int threads_before = settled_thread_count();
  auto dataset = slow_images(400);
  DataLoader loader(dataset, {.batch_size = 4, .num_workers = 8, .prefetch = 4});
  int taken = 0;
  for (auto& batch : loader) {
    EXPECT_EQ(batch.number, taken);
    if (++taken == 3) break;
  }
  EXPECT_GT(fakes::thread_count(), threads_before) << "workers still run until the next pass or stop()";
  // A new pass stops the old one and starts from its first batch.
  auto start = Clock::now();
  auto it = loader.begin();
  EXPECT_EQ(it->number, 0);
  EXPECT_EQ(it->epoch, 1);
  loader.stop();
  EXPECT_LT(seconds_since(start), 2.0);
  EXPECT_EQ(fakes::thread_count(), threads_before) << "stop() joined every worker";
}

TEST(DataLoaderShutdown, DestructorMidEpochJoinsWorkersPromptly) {
  const int threads_before = settled_thread_count();
  auto dataset = slow_images(10000);
  auto start = Clock::now();
  {
    DataLoader loader(dataset, {.batch_size = 16, .num_workers = 8, .prefetch = 3});
    auto batch = loader.next();
    ASSERT_TRUE(batch.has_value());
    EXPECT_GT(fakes::thread_count(), threads_before);
  }
  // 8 workers each finish at most the 2 ms sample in hand.
  EXPECT_LT(seconds_since(start), 2.0);
  EXPECT_EQ(fakes::thread_count(), threads_before);
  EXPECT_LT(dataset->loads.load(), 16 * 4 + 8) << "the window stopped the workers early";
}

TEST(DataLoaderShutdown, DestroyingBeforeAnyPassOrAfterTheLastIsFine) {
  const int threads_before = settled_thread_count();
  { DataLoader loader(std::make_shared<FakeImages>(8), {.num_workers = 4}); }
  {
    DataLoader loader(std::make_shared<FakeImages>(8), {.batch_size = 3, .num_workers = 4});
    int n = 0;
    for ([[maybe_unused]] auto& b : loader) ++n;
    EXPECT_EQ(n, 3);
    EXPECT_FALSE(loader.next().has_value()) << "the pass is over until a new one starts";
  }
  EXPECT_EQ(fakes::thread_count(), threads_before);
}

TEST(DataLoaderShutdown, BatchesOutliveTheLoader) {
  Batch kept;
  {
    DataLoader loader(std::make_shared<FakeImages>(8), {.batch_size = 4, .num_workers = 2});
    kept = *loader.next();
  }
  // The buffer's pool state outlives the loader; the data is intact.
  auto want = FakeImages::expected_pixels(3, {.seed = 0, .epoch = 0, .index = 3});
  EXPECT_TRUE(std::equal(want.begin(), want.end(), kept.input.data_ptr<uint8_t>() + 3 * 24));
}

TEST(DataLoaderErrors, WorkerFailureReachesTheCallerWithIndexAndPath) {
  const int threads_before = settled_thread_count();
  auto dataset = std::make_shared<FakeImages>(64, std::set<int64_t>{13});
  dataset->delay = fakes::scrambled_delays();
  DataLoader loader(dataset, {.batch_size = 4, .num_workers = 6, .prefetch = 4});
  int good = 0;
  try {
    for (auto& batch : loader) {
      EXPECT_EQ(batch.number, good);
      ++good;
    }
    ADD_FAILURE() << "expected a DataError";
  } catch (const DataError& e) {
    EXPECT_EQ(e.index(), 13);
    EXPECT_EQ(e.path(), "fake/13.jpg");
    EXPECT_NE(std::string(e.what()).find("corrupt JPEG data"), std::string::npos) << e.what();
  }
  EXPECT_EQ(good, 3) << "batches 0-2 arrive; batch 3 holds index 13";
  EXPECT_EQ(fakes::thread_count(), threads_before) << "the failed pass was stopped";
  EXPECT_FALSE(loader.next().has_value());
}

TEST(DataLoaderErrors, OtherExceptionsAreWrappedWithTheSampleDescription) {
  auto dataset = std::make_shared<FakeImages>(8, std::set<int64_t>{5});
  dataset->throw_plain = true;
  DataLoader loader(dataset, {.batch_size = 2, .num_workers = 0});
  loader.next();
  loader.next();
  try {
    loader.next();
    ADD_FAILURE() << "expected a DataError";
  } catch (const DataError& e) {
    EXPECT_EQ(e.index(), 5);
    EXPECT_EQ(e.path(), "fake/5.jpg");
    EXPECT_NE(std::string(e.what()).find("plain failure"), std::string::npos) << e.what();
  }
}

TEST(DataLoaderErrors, TheEarliestBadSampleOfABatchIsReported) {
  auto dataset = std::make_shared<FakeImages>(16, std::set<int64_t>{6, 5});
  dataset->delay = [](int64_t index) {  // 6 fails first in time, 5 comes first in the batch
    if (index == 5) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  };
  DataLoader loader(dataset, {.batch_size = 8, .num_workers = 4});
  try {
    loader.next();
    ADD_FAILURE() << "expected a DataError";
  } catch (const DataError& e) {
    EXPECT_EQ(e.index(), 5);
  }
}

TEST(DataLoaderErrors, SkipReplacesBadSamplesCountsThemAndKeepsTheBatchShape) {
  auto dataset = std::make_shared<FakeImages>(12, std::set<int64_t>{5, 6});
  DataLoader loader(dataset, {.batch_size = 4, .num_workers = 3, .on_bad_sample = OnBadSample::skip});
  std::vector<std::vector<int64_t>> indices;
  for (auto& batch : loader) {
    EXPECT_EQ(batch.input.size(0), 4);
    indices.push_back(batch.indices);
    // The stand-ins' pixels are theirs: check row by row.
    for (int64_t row = 0; row < 4; ++row) {
      int64_t index = batch.indices[static_cast<size_t>(row)];
      auto want = FakeImages::expected_pixels(index, {.seed = 0, .epoch = 0, .index = index});
      EXPECT_TRUE(std::equal(want.begin(), want.end(), batch.input.data_ptr<uint8_t>() + row * 24));
    }
  }
  ASSERT_EQ(indices.size(), size_t{3});
  // 5 -> 6 (bad) -> 7; 6 -> 7.
  EXPECT_EQ(indices[1], (std::vector<int64_t>{4, 7, 7, 7}));
  // Three failed loads: 5, then 6 as 5's stand-in, then 6 itself.
  EXPECT_EQ(loader.stats().skipped, 3);
}

TEST(DataLoaderErrors, SkipGivesUpOnARunOfBadSamples) {
  std::set<int64_t> bad;
  for (int64_t i = 0; i < 40; ++i) bad.insert(i);
  auto dataset = std::make_shared<FakeImages>(40, bad);
  DataLoader loader(dataset, {.batch_size = 4, .num_workers = 2, .on_bad_sample = OnBadSample::skip});
  EXPECT_NABLA_ERROR(loader.next(), "broken dataset", "fake/0.jpg", "corrupt JPEG data");
}

TEST(DataLoaderErrors, CollateFailureNamesTheBatch) {
  CollateFn failing = [](std::span<const Example> examples) -> Example {
    if (examples.size() < 3) throw std::runtime_error("ragged batch");
    return stack_collate(examples);
  };
  DataLoader loader(std::make_shared<fakes::FakeVectors>(5),
                    {.batch_size = 3, .num_workers = 2, .collate = failing});
  EXPECT_EQ(loader.next()->input.size(0), 3);
  EXPECT_NABLA_ERROR(loader.next(), "batch 1", "collate failed: ragged batch");
}

TEST(DataLoaderErrors, MismatchedExamplesNameBothInTheStackError) {
  class Ragged : public Dataset {
   public:
    int64_t size() const override { return 4; }
    Example get(int64_t index, const SampleContext&) override {
      return {.input = Tensor::empty({index == 2 ? 3 : 2}, {}),
              .target = Tensor::empty({}, {.dtype = kInt64})};
    }
  };
  DataLoader loader(std::make_shared<Ragged>(), {.batch_size = 4});
  EXPECT_NABLA_ERROR(loader.next(), "example 0 is float32[2]", "example 2 is float32[3]", "custom collate");
}

TEST(DataLoaderErrors, ASamplerForAnotherDatasetSizeIsRefused) {
  auto sampler = std::make_shared<SequentialSampler>(12);
  DataLoader loader(std::make_shared<FakeImages>(10),
                    {.batch_size = 4, .num_workers = 2, .sampler = sampler});
  EXPECT_NABLA_ERROR(loader.next(), "sampler gave index 10 but the dataset has 10 samples");
}

TEST(DataLoaderErrors, PinMemoryWithoutAGpuIsRefusedClearly) {
  if (nabla::cuda::is_available()) GTEST_SKIP() << "a GPU is present";
  EXPECT_NABLA_ERROR(DataLoader(std::make_shared<FakeImages>(4), {.pin_memory = true}),
                     "pin_memory=true needs a CUDA device", "pin_memory=false");
}

}  // namespace
}  // namespace nabla::data
