// DataLoader: batches come in sampler order with the right contents whatever order workers finish
// in; a seed reproduces a run; epochs differ; the window bounds memory; buffers are recycled.
// Every row is checked against FakeImages' pixel formula recomputed here.
#include <algorithm>

#include "data/fake_datasets.h"
#include "nabla/data/data_loader.h"
#include "test_util.h"

namespace nabla::data {
namespace {

using fakes::FakeImages;

// Checks every row of `batch` against the sample its index names.
void expect_rows_match(const Batch& batch, uint64_t seed) {
  const int64_t n = batch.input.size(0);
  ASSERT_EQ(batch.input.sizes(), (Shape{n, 4, 3, 2}));
  ASSERT_EQ(batch.target.sizes(), (Shape{n}));
  ASSERT_EQ(static_cast<int64_t>(batch.indices.size()), n);
  const auto* pixels = batch.input.data_ptr<uint8_t>();
  for (int64_t row = 0; row < n; ++row) {
    int64_t index = batch.indices[static_cast<size_t>(row)];
    auto want = FakeImages::expected_pixels(index, {.seed = seed, .epoch = batch.epoch, .index = index});
    ASSERT_TRUE(std::equal(want.begin(), want.end(), pixels + row * 24))
        << "row " << row << " index " << index;
    EXPECT_EQ(batch.target.data_ptr<int64_t>()[row], FakeImages::expected_label(index));
  }
}

std::vector<int64_t> all_indices(DataLoader& loader, uint64_t seed, int64_t* epoch_seen = nullptr) {
  std::vector<int64_t> out;
  for (auto& batch : loader) {
    expect_rows_match(batch, seed);
    if (epoch_seen) *epoch_seen = batch.epoch;
    out.insert(out.end(), batch.indices.begin(), batch.indices.end());
  }
  return out;
}

TEST(DataLoader, BatchesArriveInSamplerOrderWhateverOrderWorkersFinish) {
  const uint64_t seed = testing::test_seed();
  auto dataset = std::make_shared<FakeImages>(103);
  dataset->delay = fakes::scrambled_delays();
  DataLoader loader(dataset,
                    {.batch_size = 8, .shuffle = true, .num_workers = 6, .prefetch = 4, .seed = seed});
  EXPECT_EQ(loader.size(), 13);
  int64_t number = 0;
  std::vector<int64_t> seen;
  for (auto& batch : loader) {
    EXPECT_EQ(batch.number, number++);
    EXPECT_EQ(batch.input.size(0), batch.number == 12 ? 7 : 8) << "the last batch is short";
    expect_rows_match(batch, seed);
    seen.insert(seen.end(), batch.indices.begin(), batch.indices.end());
  }
  EXPECT_EQ(number, 13);
  EXPECT_EQ(seen, RandomSampler(103, seed).indices_for_epoch(0));
}

TEST(DataLoader, SameSeedSameBatchesForAnyWorkerCount) {
  const uint64_t seed = testing::test_seed();
  auto run = [&](int workers) {
    auto dataset = std::make_shared<FakeImages>(50);
    if (workers > 1) dataset->delay = fakes::scrambled_delays();
    DataLoader loader(dataset, {.batch_size = 5, .shuffle = true, .num_workers = workers, .seed = seed});
    std::vector<uint8_t> bytes;
    for (auto& batch : loader) {
      auto* p = batch.input.data_ptr<uint8_t>();
      bytes.insert(bytes.end(), p, p + batch.input.numel());
    }
    return bytes;
  };
  auto inline_run = run(0);
  EXPECT_EQ(inline_run.size(), size_t{50 * 24});
  EXPECT_EQ(run(1), inline_run);
  EXPECT_EQ(run(7), inline_run);
}

TEST(DataLoader, EachPassTakesTheNextEpochUnlessSetEpochSaysOtherwise) {
  const uint64_t seed = testing::test_seed();
  auto dataset = std::make_shared<FakeImages>(40);
  DataLoader loader(dataset, {.batch_size = 10, .shuffle = true, .num_workers = 2, .seed = seed});
  RandomSampler reference(40, seed);
  int64_t epoch = -1;
  EXPECT_EQ(all_indices(loader, seed, &epoch), reference.indices_for_epoch(0));
  EXPECT_EQ(epoch, 0);
  EXPECT_EQ(all_indices(loader, seed, &epoch), reference.indices_for_epoch(1));
  EXPECT_EQ(epoch, 1);
  loader.set_epoch(7);
  EXPECT_EQ(all_indices(loader, seed, &epoch), reference.indices_for_epoch(7));
  EXPECT_EQ(epoch, 7);
  EXPECT_NE(reference.indices_for_epoch(0), reference.indices_for_epoch(1));
}

TEST(DataLoader, DropLastDropsOnlyTheShortBatch) {
  auto dataset = std::make_shared<FakeImages>(23);
  DataLoader loader(dataset, {.batch_size = 5, .drop_last = true, .num_workers = 3});
  EXPECT_EQ(loader.size(), 4);
  std::vector<int64_t> expected(20);
  for (int64_t i = 0; i < 20; ++i) expected[static_cast<size_t>(i)] = i;
  EXPECT_EQ(all_indices(loader, 0), expected);
}

TEST(DataLoader, DistributedSamplerShardsTheDataset) {
  auto dataset = std::make_shared<FakeImages>(30);
  std::vector<int64_t> everything;
  for (int64_t rank = 0; rank < 3; ++rank) {
    auto sampler = std::make_shared<DistributedSampler>(
        30, DistributedSamplerOptions{.rank = rank, .world_size = 3, .seed = 9});
    DataLoader loader(dataset, {.batch_size = 4, .num_workers = 2, .sampler = sampler});
    auto mine = all_indices(loader, 0);
    EXPECT_EQ(mine, sampler->indices_for_epoch(0));
    everything.insert(everything.end(), mine.begin(), mine.end());
  }
  std::sort(everything.begin(), everything.end());
  for (int64_t i = 0; i < 30; ++i) EXPECT_EQ(everything[static_cast<size_t>(i)], i);
}

TEST(DataLoader, BackPressureBoundsBatchesInFlight) {
  auto dataset = std::make_shared<FakeImages>(100);
  const int prefetch = 3;
  const int64_t batch_size = 4;
  DataLoader loader(dataset, {.batch_size = batch_size, .num_workers = 4, .prefetch = prefetch});
  int64_t received = 0;
  for (auto& batch : loader) {
    ++received;
    // Give the workers time to run ahead as far as the window lets them.
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    // Delivered `received` batches: the window admits batches < received + prefetch.
    EXPECT_LT(dataset->max_index.load(), std::min<int64_t>(100, (received + prefetch) * batch_size))
        << "after batch " << batch.number;
  }
  EXPECT_EQ(received, 25);
  EXPECT_LE(loader.stats().max_in_flight, prefetch);
  EXPECT_EQ(loader.stats().max_in_flight, prefetch) << "the workers did fill the window";
  // Buffers: the window plus the one batch the loop holds, all recycled after that.
  BufferPoolStats pool = loader.buffer_stats();
  EXPECT_LE(pool.max_live, prefetch + 1);
  EXPECT_LE(pool.fresh_allocations, prefetch + 1);
  EXPECT_EQ(pool.fresh_allocations + pool.reuses, 25);
}

TEST(DataLoader, StatsReportHowLongNextBlocked) {
  auto dataset = std::make_shared<FakeImages>(12);
  dataset->delay = [](int64_t) { std::this_thread::sleep_for(std::chrono::milliseconds(3)); };
  DataLoader loader(dataset, {.batch_size = 4, .num_workers = 1, .prefetch = 1});
  double total = 0;
  for (auto& batch : loader) {
    // One worker, 3 ms a sample, and a window of one batch: each next() waits about 12 ms.
    EXPECT_GE(batch.wait_seconds, 0.008) << "batch " << batch.number;
    total += batch.wait_seconds;
  }
  LoaderStats stats = loader.stats();
  EXPECT_EQ(stats.batches, 3);
  EXPECT_EQ(stats.samples, 12);
  EXPECT_NEAR(stats.wait_seconds, total, 1e-12);
  EXPECT_GE(stats.max_wait_seconds, stats.last_wait_seconds);
}

TEST(DataLoader, GenericDatasetIsCollatedByStacking) {
  auto dataset = std::make_shared<fakes::FakeVectors>(10);
  DataLoader loader(dataset, {.batch_size = 4, .num_workers = 3});
  int64_t first = 0;
  for (auto& batch : loader) {
    const int64_t n = batch.input.size(0);
    ASSERT_EQ(batch.input.sizes(), (Shape{n, 3}));
    ASSERT_EQ(batch.target.sizes(), (Shape{n}));
    for (int64_t r = 0; r < n; ++r) {
      for (int64_t k = 0; k < 3; ++k)
        EXPECT_EQ(batch.input.data_ptr<float>()[r * 3 + k],
                  static_cast<float>(first + r) + 0.5f + static_cast<float>(k));
      EXPECT_EQ(batch.target.data_ptr<int64_t>()[r], (first + r) * 3);
    }
    first += n;
  }
  EXPECT_EQ(first, 10);
}

TEST(DataLoader, CustomCollateReplacesStacking) {
  auto dataset = std::make_shared<FakeImages>(9);
  // Sum of labels as the "target", to see the collate ran on exactly the batch's examples.
  CollateFn sum_labels = [](std::span<const Example> examples) {
    int64_t sum = 0;
    for (const auto& e : examples) sum += e.target.item<int64_t>();
    Tensor t = Tensor::empty({}, {.dtype = kInt64});
    *t.data_ptr<int64_t>() = sum;
    return Example{.input = examples.front().input, .target = t};
  };
  DataLoader loader(dataset, {.batch_size = 3, .num_workers = 2, .collate = sum_labels});
  for (auto& batch : loader) {
    int64_t want = 0;
    for (int64_t i : batch.indices) want += FakeImages::expected_label(i);
    EXPECT_EQ(batch.target.item<int64_t>(), want);
    EXPECT_EQ(batch.input.sizes(), (Shape{4, 3, 2})) << "the first example's HWC image";
  }
}

TEST(DataLoader, RejectsBadOptions) {
  auto dataset = std::make_shared<FakeImages>(4);
  EXPECT_NABLA_ERROR(DataLoader(dataset, {.batch_size = 0}), "batch_size must be >= 1");
  EXPECT_NABLA_ERROR(DataLoader(dataset, {.num_workers = -1}), "num_workers must be >= 0");
  EXPECT_NABLA_ERROR(DataLoader(dataset, {.prefetch = 0}), "prefetch");
  EXPECT_NABLA_ERROR(DataLoader(nullptr, {}), "dataset is null");
}

TEST(DataLoader, EmptyDatasetYieldsNoBatches) {
  DataLoader loader(std::make_shared<FakeImages>(0), {.batch_size = 4, .num_workers = 2});
  int batches = 0;
  for ([[maybe_unused]] auto& batch : loader) ++batches;
  EXPECT_EQ(batches, 0);
}

}  // namespace
}  // namespace nabla::data
