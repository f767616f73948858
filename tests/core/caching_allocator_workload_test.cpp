// The caching allocator under whole workloads: a replayed ResNet-like training step must not
// fragment memory, the memory-fraction cap must hold at every step of a random workload, and
// random mixes of every operation (streams, events, capture, empty_cache) must keep every
// invariant and give everything back at the end.
#include <set>
#include <thread>

#include "allocator_test_util.h"

namespace nabla::cuda {
namespace {

using namespace nabla::cuda::testing;

size_t log_uniform(std::mt19937_64& rng, size_t lo, size_t hi) {
  std::uniform_real_distribution<double> u(std::log(double(lo)), std::log(double(hi)));
  return static_cast<size_t>(std::exp(u(rng)));
}

// A model: the activation sizes of one forward pass, drawn from a few hundred distinct sizes.
struct Model {
  std::vector<size_t> sizes;        // the distinct sizes
  std::vector<size_t> activations;  // bytes of each layer's output
};

Model resnet_like_model(std::mt19937_64& rng) {
  std::set<size_t> distinct;
  while (distinct.size() < 300) distinct.insert(log_uniform(rng, 4 * kKiB, 200 * kMiB) / 256 * 256);
  Model model;
  model.sizes.assign(distinct.begin(), distinct.end());
  std::uniform_int_distribution<size_t> pick(0, model.sizes.size() - 1);
  for (int layer = 0; layer < 150; ++layer) model.activations.push_back(model.sizes[pick(rng)]);
  return model;
}

// One training step: forward keeps every activation (with workspaces that outlive the next op),
// backward frees them in reverse while gradients and temporaries come and go.
void train_step(CachingAllocator& allocator, const Model& model, std::mt19937_64& rng) {
  std::uniform_int_distribution<size_t> pick(0, model.sizes.size() - 1);
  std::bernoulli_distribution coin(0.4);
  const StreamId stream = 1;
  std::vector<void*> activations;
  void* workspace = nullptr;
  for (size_t bytes : model.activations) {
    activations.push_back(allocator.allocate(bytes, stream));
    allocator.free(std::exchange(workspace, nullptr));
    if (coin(rng)) workspace = allocator.allocate(model.sizes[pick(rng)], stream);
  }
  allocator.free(workspace);
  void* grad = allocator.allocate(model.activations.back(), stream);
  for (size_t layer = activations.size(); layer-- > 0;) {
    void* temporary = coin(rng) ? allocator.allocate(model.sizes[pick(rng)], stream) : nullptr;
    void* grad_input = allocator.allocate(model.activations[layer == 0 ? 0 : layer - 1], stream);
    allocator.free(temporary);
    allocator.free(grad);
    allocator.free(activations[layer]);
    grad = grad_input;
  }
  allocator.free(grad);
}

void expect_little_fragmentation(const AllocConfig& config) {
  std::mt19937_64 rng(nabla::testing::test_seed());
  SimulatedDevice device({.capacity = 80 * kGiB});
  CachingAllocator allocator(device, config);
  const Model model = resnet_like_model(rng);
  for (int step = 0; step < 20; ++step) train_step(allocator, model, rng);
  allocator.check_invariants();
  const size_t peak = allocator.max_memory_allocated(), reserved = allocator.memory_reserved();
  EXPECT_EQ(allocator.memory_allocated(), 0u);
  EXPECT_LE(double(reserved), 1.15 * double(peak))
      << "reserved " << format_bytes(reserved) << " for a peak of " << format_bytes(peak) << " allocated";
  EXPECT_EQ(allocator.stats().num_ooms, 0u);
  std::printf("reserved %s for a peak of %s allocated (%.3f), %zu segments, %zu device allocations\n",
              format_bytes(reserved).c_str(), format_bytes(peak).c_str(), double(reserved) / double(peak),
              allocator.stats().num_segments, size_t(allocator.stats().num_device_allocs));
}

TEST(CachingAllocatorWorkload, ReplayedTrainingStepsReserveAtMost15PercentOverPeak) {
  expect_little_fragmentation({});
}

TEST(CachingAllocatorWorkload, ReplayedTrainingStepsWithExpandableSegmentsReserveAtMost15PercentOverPeak) {
  expect_little_fragmentation({.expandable_segments = true});
}

void expect_fraction_holds(const AllocConfig& config) {
  std::mt19937_64 rng(nabla::testing::test_seed());
  SimulatedDevice device({.capacity = 4 * kGiB});
  CachingAllocator allocator(device, config);
  allocator.set_memory_fraction(0.25);
  const size_t cap = kGiB;
  std::vector<std::pair<void*, size_t>> live;
  size_t live_requested = 0, ooms = 0, successes = 0;
  for (int step = 0; step < 3000; ++step) {
    if (live.empty() || std::bernoulli_distribution(0.6)(rng)) {
      size_t bytes = log_uniform(rng, 512, 256 * kMiB);
      StreamId stream = std::uniform_int_distribution<StreamId>(1, 3)(rng);
      try {
        live.emplace_back(allocator.allocate(bytes, stream), bytes);
        live_requested += bytes;
        ++successes;
      } catch (const OutOfMemoryError&) {
        ++ooms;
      }
    } else {
      size_t i = std::uniform_int_distribution<size_t>(0, live.size() - 1)(rng);
      allocator.free(live[i].first);
      live_requested -= live[i].second;
      live[i] = live.back();
      live.pop_back();
    }
    ASSERT_LE(allocator.memory_reserved(), cap) << "step " << step;
    ASSERT_LE(device.used_bytes(), cap) << "step " << step;
    ASSERT_EQ(allocator.stats().requested_bytes, live_requested) << "step " << step;
    if (step % 50 == 0) allocator.check_invariants();
  }
  EXPECT_EQ(allocator.stats().num_ooms, ooms);
  EXPECT_GT(ooms, 0u);  // the workload did press against the cap
  EXPECT_GT(successes, 1000u);
}

TEST(CachingAllocatorWorkload, MemoryFractionCapHoldsAtEveryStepOfARandomWorkload) {
  expect_fraction_holds({});
}

TEST(CachingAllocatorWorkload, MemoryFractionCapHoldsWithExpandableSegmentsAndGarbageCollection) {
  expect_fraction_holds({.garbage_collection_threshold = 0.7, .expandable_segments = true});
}

void expect_invariants_under_random_operations(const AllocConfig& config) {
  std::mt19937_64 rng(nabla::testing::test_seed());
  SimulatedDevice device({.capacity = 2 * kGiB});
  {
    CachingAllocator allocator(device, config);
    std::vector<void*> live;
    PoolId capturing = 0, next_pool = 1;
    auto uniform = [&](size_t lo, size_t hi) { return std::uniform_int_distribution<size_t>(lo, hi)(rng); };
    for (int step = 0; step < 4000; ++step) {
      const size_t op = uniform(0, 99);
      if (op < 45 || live.empty()) {
        try {
          live.push_back(allocator.allocate(log_uniform(rng, 1, 120 * kMiB), uniform(1, 3)));
        } catch (const OutOfMemoryError&) {
        }
      } else if (op < 85) {
        size_t i = uniform(0, live.size() - 1);
        allocator.free(live[i]);
        live[i] = live.back();
        live.pop_back();
      } else if (op < 93) {
        allocator.record_stream(live[uniform(0, live.size() - 1)], uniform(1, 4));
      } else if (op < 97) {
        device.complete_events_on(uniform(1, 4));
      } else if (op < 98 && capturing == 0) {
        allocator.empty_cache();
      } else if (capturing == 0) {
        capturing = next_pool++;
        allocator.begin_allocate_to_pool(capturing, uniform(1, 3));
      } else {
        allocator.end_allocate_to_pool(capturing);
        allocator.release_pool(capturing);
        capturing = 0;
      }
      allocator.check_invariants();
    }
    if (capturing != 0) allocator.end_allocate_to_pool(capturing);
    for (void* p : live) allocator.free(p);
    if (capturing != 0) allocator.release_pool(capturing);
    allocator.empty_cache();
    EXPECT_EQ(allocator.memory_allocated(), 0u);
    EXPECT_EQ(allocator.memory_reserved(), 0u);
    EXPECT_EQ(device.used_bytes(), 0u);
    EXPECT_EQ(device.live_events(), 0u);
    EXPECT_GT(allocator.stats().num_allocs, 1000u);
  }
  EXPECT_EQ(device.live_allocations(), 0u);
}

TEST(CachingAllocatorWorkload, RandomOperationsKeepEveryInvariant) {
  expect_invariants_under_random_operations({});
}

TEST(CachingAllocatorWorkload, RandomOperationsKeepEveryInvariantWithMaxSplitAndGarbageCollection) {
  expect_invariants_under_random_operations(
      parse_alloc_config("max_split_size_mb:64,garbage_collection_threshold:0.6"));
}

TEST(CachingAllocatorWorkload, RandomOperationsKeepEveryInvariantWithExpandableSegments) {
  expect_invariants_under_random_operations({.expandable_segments = true});
}

TEST(CachingAllocatorWorkload, ConcurrentThreadsSeeConsistentAccounting) {
  SimulatedDevice device({.capacity = 16 * kGiB});
  CachingAllocator allocator(device);
  const uint64_t seed = nabla::testing::test_seed();
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&allocator, seed, t] {
      std::mt19937_64 rng(seed + t);
      std::vector<void*> live;
      for (int i = 0; i < 2000; ++i) {
        if (live.size() < 20 && std::bernoulli_distribution(0.6)(rng)) {
          live.push_back(allocator.allocate(log_uniform(rng, 1, 40 * kMiB), StreamId(t) + 1));
        } else if (!live.empty()) {
          allocator.free(live.back());
          live.pop_back();
        }
      }
      for (void* p : live) allocator.free(p);
    });
  }
  for (auto& thread : threads) thread.join();
  allocator.check_invariants();
  MemoryStats stats = allocator.stats();
  EXPECT_EQ(stats.allocated_bytes, 0u);
  EXPECT_EQ(stats.num_allocs, stats.num_frees);
  EXPECT_EQ(device.used_bytes(), stats.reserved_bytes);
}

}  // namespace
}  // namespace nabla::cuda
