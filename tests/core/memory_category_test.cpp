// Memory categories: the thread-local tag (MemoryCategoryScope), the per-category counts of the CPU
// allocator and of the caching allocator (on the simulated device), peaks, and the report.
#include <nlohmann/json.hpp>

#include <map>
#include <random>
#include <thread>
#include <vector>

#include "allocator_test_util.h"
#include "nabla/core/cpu_memory.h"
#include "nabla/core/cuda/memory.h"
#include "nabla/core/memory_category.h"

namespace nabla {
namespace {

using cuda::testing::kMiB;

constexpr MemoryCategory kAll[] = {MemoryCategory::parameters,      MemoryCategory::gradients,
                                   MemoryCategory::optimizer_state, MemoryCategory::activations,
                                   MemoryCategory::workspace,       MemoryCategory::other};

// What changed per category between two CPU snapshots (other tests' tensors may be alive).
std::array<int64_t, kNumMemoryCategories> delta(const MemoryCategoryStats& after,
                                                const MemoryCategoryStats& before) {
  std::array<int64_t, kNumMemoryCategories> d{};
  for (int c = 0; c < kNumMemoryCategories; ++c) {
    d[c] = static_cast<int64_t>(after.current[c]) - static_cast<int64_t>(before.current[c]);
  }
  return d;
}

TEST(MemoryCategory, ScopesNestAndRestoreTheOuterCategory) {
  EXPECT_EQ(current_memory_category(), MemoryCategory::other);
  {
    MemoryCategoryScope outer(MemoryCategory::activations);
    EXPECT_EQ(current_memory_category(), MemoryCategory::activations);
    {
      MemoryCategoryScope inner(MemoryCategory::workspace);
      EXPECT_EQ(current_memory_category(), MemoryCategory::workspace);
    }
    EXPECT_EQ(current_memory_category(), MemoryCategory::activations);
  }
  EXPECT_EQ(current_memory_category(), MemoryCategory::other);
  EXPECT_NABLA_ERROR(MemoryCategoryScope bad(static_cast<MemoryCategory>(17)), "not a MemoryCategory",
                     "optimizer_state");
}

TEST(MemoryCategory, NamesAreTheReportsKeys) {
  std::vector<std::string> names;
  for (MemoryCategory c : kAll) names.emplace_back(memory_category_name(c));
  EXPECT_EQ(names, (std::vector<std::string>{"parameters", "gradients", "optimizer_state", "activations",
                                             "workspace", "other"}));
}

TEST(MemoryCategoryCpu, EachAllocationIsCountedUnderTheScopeItWasMadeInUntilFreed) {
  std::mt19937_64 rng(testing::test_seed());
  const MemoryCategoryStats before = memory_category_stats(Device::cpu());
  std::array<int64_t, kNumMemoryCategories> expected{};
  std::vector<DataPtr> held;
  for (int i = 0; i < 30; ++i) {
    MemoryCategory category = kAll[rng() % kNumMemoryCategories];
    size_t bytes = 1 + rng() % 100000;
    MemoryCategoryScope scope(category);
    held.push_back(cpu_allocator().allocate(bytes));
    expected[MemoryCategoryStats::index(category)] += static_cast<int64_t>(bytes);
  }
  const MemoryCategoryStats during = memory_category_stats(Device::cpu());
  EXPECT_EQ(delta(during, before), expected);
  EXPECT_EQ(during.total - before.total, cpu_memory_allocated() - before.total);
  EXPECT_TRUE(during.tracked);
  EXPECT_EQ(during.cached, 0u);
  // The category goes with the allocation: freeing outside any scope still credits the right one.
  held.clear();
  EXPECT_EQ(delta(memory_category_stats(Device::cpu()), before),
            (std::array<int64_t, kNumMemoryCategories>{}));
}

TEST(MemoryCategoryCpu, PeaksPerCategoryAndTheBreakdownAtTheTotalPeak) {
  std::mt19937_64 rng(testing::test_seed());
  reset_memory_category_peaks(Device::cpu());
  const MemoryCategoryStats base = memory_category_stats(Device::cpu());
  const size_t params = 50000 + rng() % 1000, acts = 200000 + rng() % 1000, opt = 30000 + rng() % 1000;
  DataPtr p, a, o;
  {
    MemoryCategoryScope tag(MemoryCategory::parameters);
    p = cpu_allocator().allocate(params);
  }
  {
    MemoryCategoryScope tag(MemoryCategory::activations);
    a = cpu_allocator().allocate(acts);
  }
  a.reset();  // forward and backward are over: the activations are gone
  {
    MemoryCategoryScope tag(MemoryCategory::optimizer_state);
    o = cpu_allocator().allocate(opt);
  }
  MemoryCategoryStats s = memory_category_stats(Device::cpu());
  auto at = [](const auto& array, MemoryCategory c) { return array[MemoryCategoryStats::index(c)]; };
  EXPECT_EQ(s.peak_of(MemoryCategory::activations) - at(base.current, MemoryCategory::activations), acts);
  EXPECT_EQ(s.current_of(MemoryCategory::activations), at(base.current, MemoryCategory::activations));
  EXPECT_EQ(s.peak_total, base.total + params + acts);  // params + activations > params + opt state
  EXPECT_EQ(at(s.at_peak, MemoryCategory::activations) - at(base.current, MemoryCategory::activations), acts);
  EXPECT_EQ(at(s.at_peak, MemoryCategory::optimizer_state),
            at(base.current, MemoryCategory::optimizer_state));
  EXPECT_EQ(cpu_max_memory_allocated(), s.peak_total);
  // A reset restarts every peak from now.
  reset_memory_category_peaks(Device::cpu());
  s = memory_category_stats(Device::cpu());
  EXPECT_EQ(s.peak_total, s.total);
  EXPECT_EQ(s.peak, s.current);
  EXPECT_EQ(s.at_peak, s.current);
}

TEST(MemoryCategoryCpu, TheTagIsPerThread) {
  const MemoryCategoryStats before = memory_category_stats(Device::cpu());
  MemoryCategoryScope mine(MemoryCategory::gradients);
  DataPtr from_other_thread;
  std::thread([&] {
    EXPECT_EQ(current_memory_category(), MemoryCategory::other);  // the scope above is not this thread's
    MemoryCategoryScope theirs(MemoryCategory::workspace);
    from_other_thread = cpu_allocator().allocate(4000);
  }).join();
  DataPtr from_this_thread = cpu_allocator().allocate(3000);
  std::array<int64_t, kNumMemoryCategories> expected{};
  expected[MemoryCategoryStats::index(MemoryCategory::workspace)] = 4000;
  expected[MemoryCategoryStats::index(MemoryCategory::gradients)] = 3000;
  EXPECT_EQ(delta(memory_category_stats(Device::cpu()), before), expected);
}

TEST(MemoryCategoryCpu, ConcurrentTaggedAllocationsBalanceToZero) {
  const MemoryCategoryStats before = memory_category_stats(Device::cpu());
  std::vector<std::thread> threads;
  for (int t = 0; t < 6; ++t) {
    threads.emplace_back([t] {
      MemoryCategoryScope tag(kAll[t]);
      std::mt19937_64 rng(1000 + t);
      std::vector<DataPtr> held;
      for (int i = 0; i < 3000; ++i) {
        held.push_back(cpu_allocator().allocate(1 + rng() % 4096));
        if (rng() % 3 == 0) held.erase(held.begin() + static_cast<std::ptrdiff_t>(rng() % held.size()));
      }
    });
  }
  for (auto& thread : threads) thread.join();
  const MemoryCategoryStats after = memory_category_stats(Device::cpu());
  EXPECT_EQ(delta(after, before), (std::array<int64_t, kNumMemoryCategories>{}));
  for (int c = 0; c < kNumMemoryCategories; ++c) EXPECT_GT(after.peak[c], before.current[c]);
}

TEST(MemoryCategoryCpu, ReportListsEveryCategoryWithItsPeak) {
  reset_memory_category_peaks(Device::cpu());
  DataPtr held;
  {
    MemoryCategoryScope tag(MemoryCategory::optimizer_state);
    held = cpu_allocator().allocate(3 * 1024 * 1024);
  }
  const std::string report = memory_category_report(Device::cpu());
  for (MemoryCategory c : kAll) {
    EXPECT_NE(report.find(memory_category_name(c)), std::string::npos) << report;
  }
  EXPECT_NE(report.find("Memory by category on cpu"), std::string::npos) << report;
  // 3 MiB plus whatever optimizer state other tests left alive: at least "3.00 MiB" on its line.
  const size_t line = report.find("optimizer_state");
  const std::string row = report.substr(line, report.find('\n', line) - line);
  const size_t current = memory_category_stats(Device::cpu()).current_of(MemoryCategory::optimizer_state);
  EXPECT_NE(row.find(cuda::format_bytes(current)), std::string::npos) << row;
  EXPECT_EQ(report.find("cached"), std::string::npos) << "the CPU has no cache";
}

// The caching allocator on the simulated device: categories are block sizes, sum to allocated.
TEST(MemoryCategorySimulated, CachingAllocatorCountsBlockBytesPerCategoryAndCachedIsReservedMinusAllocated) {
  std::mt19937_64 rng(testing::test_seed());
  cuda::SimulatedDevice device({.capacity = 1024 * kMiB});
  cuda::CachingAllocator allocator(device);
  struct Held {
    void* ptr;
    MemoryCategory category;
    size_t block_bytes;  // the block's size as the snapshot's block table gives it
  };
  std::vector<Held> held;
  for (int i = 0; i < 60; ++i) {
    MemoryCategory category = kAll[rng() % kNumMemoryCategories];
    size_t bytes = 1 + rng() % (rng() % 2 ? 4096 : 24 * kMiB);
    MemoryCategoryScope scope(category);
    held.push_back({allocator.allocate(bytes, 1), category, 0});
    allocator.check_invariants();  // includes: per-category counts equal the allocated blocks'
  }
  // The reference: each block's size from the snapshot (a block may be larger than the request
  // rounded to 512 B, when the rest of its segment was too small to split off), summed per tag.
  nlohmann::json snapshot = cuda::testing::snapshot_of(allocator);
  std::map<uintptr_t, size_t> block_size;
  size_t tagged = 0;
  for (const auto& segment : snapshot["segments"]) {
    for (const auto& block : segment["blocks"]) {
      if (block["state"] == "allocated") block_size[block["address"].get<uintptr_t>()] = block["size"];
      tagged += block.contains("category") ? 1 : 0;
    }
  }
  EXPECT_EQ(tagged, held.size());  // the snapshot names each allocated block's category
  std::array<size_t, kNumMemoryCategories> expected{};
  for (Held& h : held) {
    h.block_bytes = block_size.at(cuda::testing::address_of(h.ptr));
    expected[MemoryCategoryStats::index(h.category)] += h.block_bytes;
  }
  MemoryCategoryStats s = allocator.category_stats();
  EXPECT_EQ(s.current, expected);
  EXPECT_EQ(s.peak, expected);
  EXPECT_EQ(s.at_peak, expected);
  EXPECT_EQ(s.total, allocator.memory_allocated());
  EXPECT_EQ(s.cached, allocator.memory_reserved() - allocator.memory_allocated());
  EXPECT_EQ(s.peak_reserved, allocator.max_memory_reserved());
  EXPECT_EQ(snapshot["category_bytes"]["activations"].get<size_t>(),
            expected[MemoryCategoryStats::index(MemoryCategory::activations)]);
  // Frees (here outside any scope) credit the category the block was allocated under.
  const std::array<size_t, kNumMemoryCategories> peak = expected;
  for (size_t i = 0; i < held.size(); i += 2) {
    allocator.free(held[i].ptr);
    expected[MemoryCategoryStats::index(held[i].category)] -= held[i].block_bytes;
  }
  s = allocator.category_stats();
  EXPECT_EQ(s.current, expected);
  EXPECT_EQ(s.peak, peak);  // no category grew after the loop
  EXPECT_EQ(s.cached, allocator.memory_reserved() - allocator.memory_allocated());
  allocator.check_invariants();
  allocator.reset_peak_memory_stats();
  EXPECT_EQ(allocator.category_stats().peak, expected);
  for (size_t i = 1; i < held.size(); i += 2) allocator.free(held[i].ptr);
  s = allocator.category_stats();
  EXPECT_EQ(s.total, 0u);
  EXPECT_EQ(s.cached, allocator.memory_reserved());
  allocator.check_invariants();
}

TEST(MemoryCategorySimulated, AnOutOfMemoryLeavesTheCountsUnchanged) {
  cuda::SimulatedDevice device({.capacity = 64 * kMiB});
  cuda::CachingAllocator allocator(device);
  MemoryCategoryScope tag(MemoryCategory::activations);
  void* p = allocator.allocate(40 * kMiB, 1);
  EXPECT_THROW(allocator.allocate(40 * kMiB, 1), OutOfMemoryError);
  MemoryCategoryStats s = allocator.category_stats();
  EXPECT_EQ(s.current_of(MemoryCategory::activations), 40 * kMiB);
  EXPECT_EQ(s.total, 40 * kMiB);
  allocator.free(p);
  EXPECT_EQ(allocator.category_stats().total, 0u);
  allocator.check_invariants();
}

TEST(MemoryCategorySimulated, ReportOfACudaDeviceHasTheCachedRow) {
  cuda::SimulatedDevice device;
  cuda::CachingAllocator allocator(device);
  void* p = nullptr;
  {
    MemoryCategoryScope tag(MemoryCategory::parameters);
    p = allocator.allocate(3 * kMiB, 1);  // a 20 MiB segment: 17 MiB cached
  }
  const std::string report = memory_category_report(allocator.category_stats(), Device::cuda(0));
  EXPECT_NE(report.find("cuda:0"), std::string::npos) << report;
  const size_t line = report.find("cached");
  ASSERT_NE(line, std::string::npos) << report;
  EXPECT_NE(report.find("17.00 MiB", line), std::string::npos) << report;
  const size_t params = report.find("parameters");
  EXPECT_NE(report.substr(params, report.find('\n', params) - params).find("3.00 MiB"), std::string::npos)
      << report;
  allocator.free(p);
}

TEST(MemoryCategory, NativeBackendReportSaysItIsNotTracked) {
  MemoryCategoryStats untracked;
  untracked.tracked = false;
  EXPECT_NE(memory_category_report(untracked, Device::cuda(0)).find("not tracked"), std::string::npos);
}

// On the GPU (skips without one): tensors are counted under their scope, the categories sum to
// what the caching allocator has allocated, and frees give the bytes back.
TEST(CudaMemoryCategory, TensorsAreCountedUnderTheirScopeAndSumToAllocated) {
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  if (cuda::allocator_backend() != "caching") GTEST_SKIP() << "native allocator: categories are not tracked";
  const Device gpu = Device::cuda(0);
  cuda::current_stream(0).synchronize();
  const MemoryCategoryStats before = memory_category_stats(gpu);
  ASSERT_TRUE(before.tracked);
  Tensor params, acts;
  {
    MemoryCategoryScope tag(MemoryCategory::parameters);
    params = Tensor::empty({1 << 20}, {.device = gpu});  // 4 MiB
  }
  {
    MemoryCategoryScope tag(MemoryCategory::activations);
    acts = Tensor::empty({3 << 20}, {.device = gpu});  // 12 MiB
  }
  const MemoryCategoryStats during = memory_category_stats(gpu);
  const auto d = delta(during, before);
  // A reused cached block may be up to 1 MiB larger than asked (it is not split below that).
  EXPECT_GE(d[MemoryCategoryStats::index(MemoryCategory::parameters)], 4 * static_cast<int64_t>(kMiB));
  EXPECT_LE(d[MemoryCategoryStats::index(MemoryCategory::parameters)], 5 * static_cast<int64_t>(kMiB));
  EXPECT_GE(d[MemoryCategoryStats::index(MemoryCategory::activations)], 12 * static_cast<int64_t>(kMiB));
  EXPECT_LE(d[MemoryCategoryStats::index(MemoryCategory::activations)], 13 * static_cast<int64_t>(kMiB));
  for (MemoryCategory c : {MemoryCategory::gradients, MemoryCategory::optimizer_state,
                           MemoryCategory::workspace, MemoryCategory::other}) {
    EXPECT_EQ(d[MemoryCategoryStats::index(c)], 0) << memory_category_name(c);
  }
  EXPECT_EQ(during.total, cuda::memory_allocated(0));
  EXPECT_EQ(during.cached, cuda::memory_reserved(0) - cuda::memory_allocated(0));
  const std::string report = memory_category_report(gpu);
  EXPECT_NE(report.find("cuda:0"), std::string::npos) << report;
  EXPECT_NE(report.find("cached"), std::string::npos) << report;
  params = Tensor();
  acts = Tensor();
  EXPECT_EQ(delta(memory_category_stats(gpu), before), (std::array<int64_t, kNumMemoryCategories>{}));
}

}  // namespace
}  // namespace nabla
