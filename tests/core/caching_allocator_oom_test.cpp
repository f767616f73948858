// The caching allocator out of memory (freeing the cache and retrying, the error and its message,
// the memory-fraction cap) and its reporting (stats, peaks, the summary table, the JSON snapshot).
#include "allocator_test_util.h"

namespace nabla::cuda {
namespace {

using namespace nabla::cuda::testing;

// The message of the OutOfMemoryError that `allocate` throws ("" and a failure if none).
std::string oom_message(CachingAllocator& allocator, size_t bytes, StreamId stream) {
  try {
    allocator.allocate(bytes, stream);
  } catch (const OutOfMemoryError& e) {
    return e.what();
  }
  ADD_FAILURE() << "allocating " << bytes << " bytes did not throw OutOfMemoryError";
  return "";
}

void expect_contains(const std::string& text, const std::vector<std::string>& fragments) {
  for (const auto& fragment : fragments) {
    EXPECT_NE(text.find(fragment), std::string::npos) << "\"" << text << "\" lacks \"" << fragment << "\"";
  }
}

TEST(CachingAllocatorOom, FreesTheCacheAndRetries) {
  SimulatedDevice device({.capacity = 64 * kMiB});
  CachingAllocator allocator(device);
  allocator.free(allocator.allocate(40 * kMiB, 1));
  // Stream 2 cannot reuse stream 1's cached block, and 40 + 40 MiB do not fit the device.
  void* p = allocator.allocate(40 * kMiB, 2);
  EXPECT_NE(p, nullptr);
  EXPECT_EQ(allocator.stats().num_alloc_retries, 1u);
  EXPECT_EQ(allocator.stats().num_ooms, 0u);
  EXPECT_EQ(allocator.memory_reserved(), 40 * kMiB);
  EXPECT_EQ(device.counts().free_calls, 1u);
  EXPECT_EQ(device.counts().failed_allocations, 1u);
  allocator.check_invariants();
}

TEST(CachingAllocatorOom, RetriesOnceThenThrows) {
  SimulatedDevice device;
  CachingAllocator allocator(device);
  device.fail_next_allocations(1);
  EXPECT_NE(allocator.allocate(4 * kMiB, 1), nullptr);
  EXPECT_EQ(allocator.stats().num_alloc_retries, 1u);
  device.fail_next_allocations(2);
  EXPECT_THROW(allocator.allocate(30 * kMiB, 1), OutOfMemoryError);
  EXPECT_EQ(allocator.stats().num_alloc_retries, 2u);
  EXPECT_EQ(allocator.stats().num_ooms, 1u);
  EXPECT_EQ(device.counts().allocate_calls, 4u);
}

TEST(CachingAllocatorOom, ErrorGivesRequestedAllocatedReservedLimitAndFreeInHumanUnits) {
  SimulatedDevice device({.capacity = 8 * kGiB});
  CachingAllocator allocator(device);
  allocator.set_memory_fraction(0.5);
  void* kept = allocator.allocate(1 * kGiB, 1);
  std::string message = oom_message(allocator, 3 * kGiB + 512 * kMiB, 1);
  expect_contains(message, {"tried to allocate 3.50 GiB", "1.00 GiB allocated", "1.00 GiB reserved",
                            "limit of 4.00 GiB", "memory fraction 0.50", "7.00 GiB free of 8.00 GiB"});
  // The cap is checked before the device is asked.
  EXPECT_EQ(device.counts().allocate_calls, 1u);
  EXPECT_EQ(allocator.stats().num_ooms, 1u);
  // Still usable: what fits under the cap succeeds.
  void* more = allocator.allocate(2 * kGiB, 1);
  EXPECT_EQ(allocator.memory_reserved(), 3 * kGiB);
  allocator.free(more);
  allocator.free(kept);
  allocator.check_invariants();
}

TEST(CachingAllocatorOom, ErrorWithoutAFractionReportsTheDevicesFreeMemory) {
  SimulatedDevice device({.capacity = 1 * kGiB});
  device.set_external_usage(512 * kMiB);  // another process
  CachingAllocator allocator(device);
  void* small = allocator.allocate(3 * kKiB, 1);
  std::string message = oom_message(allocator, 600 * kMiB, 1);
  expect_contains(message, {"tried to allocate 600.00 MiB", "3.00 KiB allocated", "2.00 MiB reserved",
                            "510.00 MiB free of 1.00 GiB"});
  EXPECT_EQ(message.find("limit"), std::string::npos);
  allocator.free(small);
}

TEST(CachingAllocatorOom, ImpossibleSizesAreOutOfMemoryNotOverflow) {
  SimulatedDevice device;
  CachingAllocator allocator(device);
  EXPECT_THROW(allocator.allocate(std::numeric_limits<size_t>::max(), 1), OutOfMemoryError);
  EXPECT_THROW(allocator.allocate(std::numeric_limits<size_t>::max() - 100, 1), OutOfMemoryError);
  EXPECT_EQ(allocator.stats().num_ooms, 2u);
  EXPECT_EQ(allocator.memory_reserved(), 0u);
}

TEST(CachingAllocatorOom, AllocatorStaysConsistentAndUsableAfterOutOfMemory) {
  SimulatedDevice device({.capacity = 100 * kMiB});
  CachingAllocator allocator(device);
  std::vector<void*> live;
  for (int i = 0; i < 6; ++i) live.push_back(allocator.allocate(12 * kMiB, 1));
  allocator.record_stream(live[0], 2);
  allocator.free(live[0]);                                           // pending on stream 2
  allocator.free(live[1]);                                           // cached
  EXPECT_THROW(allocator.allocate(60 * kMiB, 1), OutOfMemoryError);  // 48 + 60 MiB > 100 MiB
  allocator.check_invariants();
  // The out-of-memory path waited for the pending block and gave back both cached segments.
  EXPECT_EQ(allocator.memory_reserved(), 48 * kMiB);
  EXPECT_EQ(device.live_events(), 0u);
  for (size_t i = 2; i < live.size(); ++i) allocator.free(live[i]);
  void* p = allocator.allocate(60 * kMiB, 1);  // fits once the freed blocks' segments go
  EXPECT_NE(p, nullptr);
  allocator.check_invariants();
}

TEST(CachingAllocatorOom, MemoryFractionCapsReservedMemory) {
  SimulatedDevice device({.capacity = 1 * kGiB});
  CachingAllocator allocator(device);
  allocator.set_memory_fraction(0.25);  // 256 MiB
  allocator.free(allocator.allocate(200 * kMiB, 1));
  void* p = allocator.allocate(100 * kMiB, 2);  // 300 MiB would pass the cap: the cache goes first
  EXPECT_NE(p, nullptr);
  EXPECT_EQ(allocator.memory_reserved(), 100 * kMiB);
  EXPECT_EQ(allocator.stats().num_alloc_retries, 1u);
  EXPECT_LE(device.peak_used_bytes(), 256 * kMiB);
  EXPECT_THROW(allocator.allocate(200 * kMiB, 2), OutOfMemoryError);
  EXPECT_LE(device.peak_used_bytes(), 256 * kMiB);
}

TEST(CachingAllocatorOom, LoweringTheFractionGivesBackTheCache) {
  SimulatedDevice device({.capacity = 1 * kGiB});
  CachingAllocator allocator(device);
  allocator.free(allocator.allocate(500 * kMiB, 1));
  allocator.set_memory_fraction(0.25);
  EXPECT_EQ(allocator.memory_reserved(), 0u);
}

TEST(CachingAllocatorOom, MemoryFractionMustBeInZeroToOne) {
  SimulatedDevice device;
  CachingAllocator allocator(device);
  EXPECT_NABLA_ERROR(allocator.set_memory_fraction(0.0), "(0, 1]", "got 0");
  EXPECT_NABLA_ERROR(allocator.set_memory_fraction(1.5), "(0, 1]", "got 1.5");
  allocator.set_memory_fraction(1.0);
}

TEST(CachingAllocatorStats, CountsAllocationsFreesAndPeaks) {
  SimulatedDevice device;
  CachingAllocator allocator(device);
  void* a = allocator.allocate(3 * kMiB, 1);   // 20 MiB segment
  void* b = allocator.allocate(30 * kMiB, 1);  // 30 MiB segment
  void* c = allocator.allocate(1000, 1);       // 2 MiB small segment, 1024-byte block
  allocator.free(b);
  MemoryStats s = allocator.stats();
  EXPECT_EQ(s.num_allocs, 3u);
  EXPECT_EQ(s.num_frees, 1u);
  EXPECT_EQ(s.num_device_allocs, 3u);
  EXPECT_EQ(s.num_segments, 3u);
  EXPECT_EQ(s.num_allocated_blocks, 2u);
  EXPECT_EQ(allocator.memory_allocated(), 3 * kMiB + 1024);
  EXPECT_EQ(allocator.max_memory_allocated(), 33 * kMiB + 1024);
  EXPECT_EQ(allocator.memory_reserved(), 52 * kMiB);
  EXPECT_EQ(allocator.max_memory_reserved(), 52 * kMiB);
  EXPECT_EQ(s.requested_bytes, 3 * kMiB + 1000);
  allocator.empty_cache();
  allocator.reset_peak_memory_stats();
  EXPECT_EQ(allocator.max_memory_allocated(), 3 * kMiB + 1024);
  EXPECT_EQ(allocator.max_memory_reserved(), 22 * kMiB);
  allocator.free(a);
  allocator.free(c);
  EXPECT_EQ(allocator.max_memory_allocated(), 3 * kMiB + 1024);  // peaks never fall on free
  EXPECT_EQ(allocator.stats().num_frees, 3u);
}

TEST(CachingAllocatorStats, FormatsBytesInHumanUnits) {
  EXPECT_EQ(format_bytes(0), "0 B");
  EXPECT_EQ(format_bytes(512), "512 B");
  EXPECT_EQ(format_bytes(4 * kKiB), "4.00 KiB");
  EXPECT_EQ(format_bytes(1536 * kKiB), "1.50 MiB");
  EXPECT_EQ(format_bytes(2 * kGiB), "2.00 GiB");
  EXPECT_EQ(format_bytes(3 * kGiB * 1024), "3.00 TiB");
}

TEST(CachingAllocatorStats, SummaryTableShowsCurrentAndPeakAndCounters) {
  SimulatedDevice device({.capacity = 1 * kGiB});
  CachingAllocator allocator(device, parse_alloc_config("max_split_size_mb:64"), 3);
  allocator.set_memory_fraction(0.5);
  void* a = allocator.allocate(100 * kMiB, 1);
  allocator.free(allocator.allocate(40 * kMiB, 1));
  EXPECT_THROW(allocator.allocate(800 * kMiB, 1), OutOfMemoryError);
  std::string summary = allocator.memory_summary();
  expect_contains(summary, {"cuda:3", "Allocated memory", "100.00 MiB", "140.00 MiB", "Reserved memory",
                            "Out-of-memory errors", "Memory limit: 512.00 MiB (memory fraction 0.50)",
                            "max_split_size_mb:64"});
  // The counters' rows carry the counts.
  auto row = [&](const std::string& name) {
    size_t at = summary.find(name);
    return at == std::string::npos ? std::string() : summary.substr(at, summary.find('\n', at) - at);
  };
  EXPECT_NE(row("Allocations").find(" 2 "), std::string::npos) << row("Allocations");
  EXPECT_NE(row("Out-of-memory errors").find(" 1 "), std::string::npos) << row("Out-of-memory errors");
  EXPECT_NE(row("Retries after freeing the cache").find(" 1 "), std::string::npos);
  allocator.free(a);
}

TEST(CachingAllocatorStats, SnapshotListsSegmentsAndBlocksWithTheirStates) {
  SimulatedDevice device;
  CachingAllocator allocator(device);
  void* small = allocator.allocate(256 * kKiB, 7);
  void* pending = allocator.allocate(4 * kMiB, 7);
  void* live = allocator.allocate(5 * kMiB, 7);
  allocator.record_stream(pending, 8);
  allocator.free(pending);
  nlohmann::json snapshot = snapshot_of(allocator);
  EXPECT_EQ(snapshot["allocated_bytes"], 256 * kKiB + 5 * kMiB);
  EXPECT_EQ(snapshot["reserved_bytes"], 22 * kMiB);
  EXPECT_EQ(snapshot["active_bytes"], 256 * kKiB + 9 * kMiB);
  EXPECT_EQ(snapshot["num_allocs"], 3);
  EXPECT_EQ(snapshot["memory_limit_bytes"], nullptr);
  ASSERT_EQ(snapshot["segments"].size(), 2u);

  nlohmann::json small_segment = segment_holding(snapshot, small);
  EXPECT_EQ(small_segment["address"], address_of(small));
  EXPECT_EQ(small_segment["size"], 2 * kMiB);
  EXPECT_EQ(small_segment["stream"], 7);
  EXPECT_EQ(small_segment["pool"], "small");
  EXPECT_EQ(small_segment["allocated_bytes"], 256 * kKiB);
  ASSERT_EQ(small_segment["blocks"].size(), 2u);
  EXPECT_EQ(small_segment["blocks"][0]["requested_size"], 256 * kKiB);
  EXPECT_EQ(small_segment["blocks"][1]["state"], "free");
  EXPECT_EQ(small_segment["blocks"][1]["size"], 2 * kMiB - 256 * kKiB);

  nlohmann::json large_segment = segment_holding(snapshot, pending);
  EXPECT_EQ(large_segment["size"], 20 * kMiB);
  EXPECT_EQ(large_segment["pool"], "large");
  EXPECT_EQ(large_segment["allocated_bytes"], 5 * kMiB);
  EXPECT_EQ(large_segment["active_bytes"], 9 * kMiB);
  const auto& blocks = large_segment["blocks"];
  ASSERT_EQ(blocks.size(), 3u);
  std::vector<std::string> states = {blocks[0]["state"], blocks[1]["state"], blocks[2]["state"]};
  EXPECT_EQ(states, (std::vector<std::string>{"pending_event", "allocated", "free"}));
  EXPECT_EQ(blocks[0]["address"], address_of(pending));
  EXPECT_EQ(blocks[1]["address"], address_of(live));
  size_t covered = 0;
  for (const auto& block : blocks) covered += block["size"].get<size_t>();
  EXPECT_EQ(covered, 20 * kMiB);
  allocator.free(small);
  allocator.free(live);
}

}  // namespace
}  // namespace nabla::cuda
