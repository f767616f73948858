// Private pools for CUDA graph capture (Note [Private pools for graph capture]) and expandable
// segments (Note [Expandable segments]) on a simulated device.
#include "allocator_test_util.h"

namespace nabla::cuda {
namespace {

using namespace nabla::cuda::testing;

constexpr PoolId kPool = 42;

TEST(CachingAllocatorPrivatePool, CaptureRoutesTheStreamsAllocationsToThePool) {
  SimulatedDevice device;
  CachingAllocator allocator(device);
  void* cached = allocator.allocate(4 * kMiB, 1);
  allocator.free(cached);
  allocator.begin_allocate_to_pool(kPool, 1);
  void* captured = allocator.allocate(4 * kMiB, 1);
  EXPECT_NE(captured, cached);  // the shared cache is not used during capture
  void* uncaptured = allocator.allocate(4 * kMiB, 2);
  allocator.end_allocate_to_pool(kPool);
  nlohmann::json snapshot = snapshot_of(allocator);
  EXPECT_EQ(segment_holding(snapshot, captured)["private_pool"], kPool);
  EXPECT_EQ(segment_holding(snapshot, uncaptured)["private_pool"], 0);
  EXPECT_EQ(segment_holding(snapshot, cached)["private_pool"], 0);
  allocator.check_invariants();
}

TEST(CachingAllocatorPrivatePool, PoolBlocksServeOnlyAllocationsRoutedToThePool) {
  SimulatedDevice device;
  CachingAllocator allocator(device);
  allocator.begin_allocate_to_pool(kPool, 1);
  void* p = allocator.allocate(4 * kMiB, 1);
  allocator.free(p);
  EXPECT_EQ(allocator.allocate(4 * kMiB, 1), p);  // freed blocks return to the pool
  allocator.free(p);
  allocator.end_allocate_to_pool(kPool);
  void* outside = allocator.allocate(4 * kMiB, 1);
  EXPECT_NE(outside, p);
  EXPECT_EQ(allocator.stats().num_device_allocs, 2u);
  allocator.begin_allocate_to_pool(kPool, 1);  // a second capture shares the pool
  EXPECT_EQ(allocator.allocate(4 * kMiB, 1), p);
  allocator.end_allocate_to_pool(kPool);
  allocator.check_invariants();
}

TEST(CachingAllocatorPrivatePool, CaptureNeverWaitsOnEventsNorFreesDeviceMemory) {
  SimulatedDevice device({.capacity = 80 * kMiB});
  CachingAllocator allocator(device);
  allocator.free(allocator.allocate(40 * kMiB, 1));  // cached, would be freed on out of memory
  void* shared = allocator.allocate(4 * kMiB, 3);    // a 20 MiB segment
  allocator.record_stream(shared, 4);
  const SimulatedDeviceCounts before = device.counts();

  allocator.begin_allocate_to_pool(kPool, 1);
  void* captured = allocator.allocate(10 * kMiB, 1);
  allocator.free(shared);  // needs an event on stream 4: deferred until the capture ends
  // 20 MiB would fit if the cache were freed, but freeing synchronizes: out of memory instead.
  try {
    allocator.allocate(20 * kMiB, 1);
    ADD_FAILURE() << "expected OutOfMemoryError";
  } catch (const OutOfMemoryError& e) {
    EXPECT_NE(std::string(e.what()).find("graph capture is underway"), std::string::npos) << e.what();
  }
  EXPECT_NABLA_ERROR(allocator.empty_cache(), "capture is underway");
  const SimulatedDeviceCounts during = device.counts();
  EXPECT_EQ(during.event_records, before.event_records);
  EXPECT_EQ(during.event_queries, before.event_queries);
  EXPECT_EQ(during.event_synchronizations, 0u);
  EXPECT_EQ(during.free_calls, 0u);
  EXPECT_EQ(allocator.stats().num_alloc_retries, 0u);
  allocator.end_allocate_to_pool(kPool);

  EXPECT_EQ(device.counts().event_records, before.event_records + 1);  // the deferred free's event
  // After the capture the same request may free the cache and retry.
  EXPECT_NE(allocator.allocate(20 * kMiB, 5), nullptr);
  EXPECT_EQ(allocator.stats().num_alloc_retries, 1u);
  allocator.free(captured);
  allocator.check_invariants();
}

TEST(CachingAllocatorPrivatePool, PoolKeepsItsSegmentsUntilReleasedThenTheyAreOrdinaryCache) {
  SimulatedDevice device;
  CachingAllocator allocator(device);
  allocator.begin_allocate_to_pool(kPool, 1);
  void* p = allocator.allocate(4 * kMiB, 1);
  allocator.free(p);
  allocator.end_allocate_to_pool(kPool);
  allocator.empty_cache();
  EXPECT_EQ(allocator.memory_reserved(), 20 * kMiB);  // a graph may still replay into it
  allocator.release_pool(kPool);
  EXPECT_EQ(allocator.allocate(4 * kMiB, 1), p);  // now shared cache
  allocator.free(p);
  allocator.empty_cache();
  EXPECT_EQ(allocator.memory_reserved(), 0u);
  EXPECT_EQ(device.live_allocations(), 0u);
}

TEST(CachingAllocatorPrivatePool, BlocksLiveAtReleaseReturnToTheSharedPoolWhenFreed) {
  SimulatedDevice device;
  CachingAllocator allocator(device);
  allocator.begin_allocate_to_pool(kPool, 1);
  void* p = allocator.allocate(300 * kKiB, 1);
  void* q = allocator.allocate(300 * kKiB, 1);
  allocator.end_allocate_to_pool(kPool);
  allocator.release_pool(kPool);
  allocator.free(p);
  EXPECT_EQ(allocator.allocate(300 * kKiB, 1), p);
  allocator.check_invariants();
  allocator.free(p);
  allocator.free(q);
  allocator.empty_cache();
  EXPECT_EQ(allocator.memory_reserved(), 0u);
}

TEST(CachingAllocatorPrivatePool, MisuseIsAnError) {
  SimulatedDevice device;
  CachingAllocator allocator(device);
  EXPECT_NABLA_ERROR(allocator.begin_allocate_to_pool(0, 1), "pool id 0 is reserved");
  allocator.begin_allocate_to_pool(kPool, 1);
  EXPECT_NABLA_ERROR(allocator.begin_allocate_to_pool(7, 1), "already allocates to pool 42");
  EXPECT_NABLA_ERROR(allocator.end_allocate_to_pool(7), "no stream allocates to pool 7");
  EXPECT_NABLA_ERROR(allocator.release_pool(kPool), "pool 42 is still in use by a capture");
  EXPECT_NABLA_ERROR(allocator.release_pool(9), "no private pool 9");
  allocator.end_allocate_to_pool(kPool);
  allocator.release_pool(kPool);
}

TEST(CachingAllocatorExpandable, LargeBlocksOfAStreamComeFromOneSegmentGrowingInPlace) {
  SimulatedDevice device({.granularity = 2 * kMiB});
  CachingAllocator allocator(device, {.expandable_segments = true});
  ASSERT_TRUE(allocator.uses_expandable_segments());
  void* a = allocator.allocate(30 * kMiB, 1);
  void* b = allocator.allocate(50 * kMiB, 1);
  void* c = allocator.allocate(12 * kMiB + 100, 1);
  EXPECT_EQ(address_of(b), address_of(a) + 30 * kMiB);
  EXPECT_EQ(address_of(c), address_of(b) + 50 * kMiB);
  EXPECT_EQ(allocator.memory_reserved(), 94 * kMiB);  // 12 MiB + 100 B maps 14 MiB
  EXPECT_EQ(device.counts().allocate_calls, 0u);
  EXPECT_EQ(device.counts().map_calls, 3u);
  nlohmann::json snapshot = snapshot_of(allocator);
  ASSERT_EQ(snapshot["segments"].size(), 1u);
  EXPECT_EQ(snapshot["segments"][0]["expandable"], true);
  EXPECT_EQ(snapshot["segments"][0]["size"], 94 * kMiB);
  allocator.check_invariants();
}

TEST(CachingAllocatorExpandable, FreeTailGrowsByOnlyTheMissingPages) {
  SimulatedDevice device({.granularity = 2 * kMiB});
  CachingAllocator allocator(device, {.expandable_segments = true});
  void* a = allocator.allocate(30 * kMiB, 1);
  void* b = allocator.allocate(50 * kMiB, 1);
  allocator.free(b);
  void* c = allocator.allocate(61 * kMiB, 1);
  EXPECT_EQ(c, b);
  EXPECT_EQ(allocator.memory_reserved(), 92 * kMiB);  // 30 + 50 + the 12 MiB missing
  allocator.free(a);
  allocator.free(c);
  allocator.check_invariants();
}

TEST(CachingAllocatorExpandable, EmptyCacheUnmapsWholeFreePagesAtTheEnd) {
  SimulatedDevice device({.granularity = 2 * kMiB});
  CachingAllocator allocator(device, {.expandable_segments = true});
  void* a = allocator.allocate(31 * kMiB, 1);
  void* b = allocator.allocate(50 * kMiB, 1);
  allocator.free(b);
  allocator.empty_cache();
  EXPECT_EQ(allocator.memory_reserved(), 32 * kMiB);  // the page holding a's last byte stays
  EXPECT_EQ(device.used_bytes(), 32 * kMiB);
  allocator.check_invariants();
  allocator.free(a);
  allocator.empty_cache();
  EXPECT_EQ(allocator.memory_reserved(), 0u);
  EXPECT_EQ(device.live_allocations(), 0u);  // the address range went back too
  EXPECT_EQ(allocator.stats().num_segments, 0u);
}

TEST(CachingAllocatorExpandable, HolesInTheMiddleAreReusedAndMerged) {
  SimulatedDevice device({.granularity = 2 * kMiB});
  CachingAllocator allocator(device, {.expandable_segments = true});
  void* a = allocator.allocate(20 * kMiB, 1);
  void* b = allocator.allocate(20 * kMiB, 1);
  void* c = allocator.allocate(20 * kMiB, 1);
  allocator.free(b);
  void* d = allocator.allocate(8 * kMiB, 1);
  EXPECT_EQ(d, b);  // best fit inside the hole, no new pages
  EXPECT_EQ(allocator.memory_reserved(), 60 * kMiB);
  allocator.free(d);
  allocator.free(a);
  EXPECT_EQ(allocator.allocate(40 * kMiB, 1), a);  // a and b's space merged
  allocator.free(c);
  allocator.check_invariants();
}

TEST(CachingAllocatorExpandable, PendingTailIsNotGrownIntoUntilItsEventCompletes) {
  SimulatedDevice device({.granularity = 2 * kMiB});
  CachingAllocator allocator(device, {.expandable_segments = true});
  void* a = allocator.allocate(30 * kMiB, 1);
  allocator.record_stream(a, 2);
  allocator.free(a);
  void* b = allocator.allocate(20 * kMiB, 1);
  EXPECT_EQ(address_of(b), address_of(a) + 30 * kMiB);
  device.complete_events_on(2);
  EXPECT_EQ(allocator.allocate(30 * kMiB, 1), a);
  allocator.check_invariants();
}

TEST(CachingAllocatorExpandable, EachStreamHasItsOwnSegmentAndSmallRequestsUseOrdinaryOnes) {
  SimulatedDevice device({.granularity = 2 * kMiB});
  CachingAllocator allocator(device, {.expandable_segments = true});
  allocator.allocate(30 * kMiB, 1);
  allocator.allocate(30 * kMiB, 2);
  allocator.allocate(100 * kKiB, 1);
  nlohmann::json segments = snapshot_of(allocator)["segments"];
  ASSERT_EQ(segments.size(), 3u);
  int expandable = 0;
  for (const auto& s : segments) expandable += s["expandable"].get<bool>();
  EXPECT_EQ(expandable, 2);
  EXPECT_EQ(device.counts().allocate_calls, 1u);  // the small segment
  EXPECT_EQ(allocator.memory_reserved(), 62 * kMiB);
}

TEST(CachingAllocatorExpandable, OutOfMemoryUnmapsOtherStreamsFreeTailsAndRetries) {
  SimulatedDevice device({.capacity = 100 * kMiB, .granularity = 2 * kMiB});
  CachingAllocator allocator(device, {.expandable_segments = true});
  allocator.free(allocator.allocate(60 * kMiB, 1));
  void* p = allocator.allocate(60 * kMiB, 2);
  EXPECT_NE(p, nullptr);
  EXPECT_EQ(allocator.stats().num_alloc_retries, 1u);
  EXPECT_EQ(allocator.memory_reserved(), 60 * kMiB);
  EXPECT_EQ(device.counts().unmap_calls, 1u);
  allocator.check_invariants();
}

TEST(CachingAllocatorExpandable, MemoryFractionCapsMappedMemory) {
  SimulatedDevice device({.capacity = 100 * kMiB, .granularity = 2 * kMiB});
  CachingAllocator allocator(device, {.expandable_segments = true});
  allocator.set_memory_fraction(0.5);
  void* a = allocator.allocate(40 * kMiB, 1);
  EXPECT_THROW(allocator.allocate(20 * kMiB, 1), OutOfMemoryError);
  EXPECT_LE(device.peak_used_bytes(), 50 * kMiB);
  allocator.free(a);
  EXPECT_NE(allocator.allocate(50 * kMiB, 1), nullptr);  // grows into the freed tail
  EXPECT_EQ(allocator.memory_reserved(), 50 * kMiB);
}

TEST(CachingAllocatorExpandable, DeviceWithoutSupportFallsBackToOrdinarySegments) {
  SimulatedDevice device({.supports_expandable = false});
  CachingAllocator allocator(device, {.expandable_segments = true});
  EXPECT_FALSE(allocator.uses_expandable_segments());
  allocator.allocate(30 * kMiB, 1);
  allocator.allocate(30 * kMiB, 1);
  EXPECT_EQ(device.counts().allocate_calls, 2u);
  EXPECT_EQ(device.counts().map_calls, 0u);
}

}  // namespace
}  // namespace nabla::cuda
