// The caching allocator's policy on a simulated device: size rounding and pool choice, best fit,
// splitting and merging, per-stream reuse, record_stream, garbage collection and max_split_size.
// Out-of-memory handling, stats and reporting are in caching_allocator_oom_test.cpp.
#include "allocator_test_util.h"

namespace nabla::cuda {
namespace {

using namespace nabla::cuda::testing;

constexpr StreamId kStream = 1, kOtherStream = 2;

TEST(CachingAllocator, RoundsRequestsUpToMultiplesOf512Bytes) {
  SimulatedDevice device;
  CachingAllocator allocator(device);
  std::mt19937_64 rng(nabla::testing::test_seed());
  size_t expected = 0, requested = 0;
  std::vector<void*> live;
  for (int i = 0; i < 50; ++i) {
    size_t bytes = std::uniform_int_distribution<size_t>(1, 64 * kKiB)(rng);
    live.push_back(allocator.allocate(bytes, kStream));
    expected += ceil_to(bytes, 512);
    requested += bytes;
    EXPECT_EQ(allocator.memory_allocated(), expected) << "after " << bytes << " bytes";
  }
  EXPECT_EQ(allocator.stats().requested_bytes, requested);
  for (void* p : live) allocator.free(p);
  EXPECT_EQ(allocator.memory_allocated(), 0u);
  allocator.check_invariants();
}

TEST(CachingAllocator, SmallRequestsShareTwoMiBSegments) {
  SimulatedDevice device;
  CachingAllocator allocator(device);
  void* a = allocator.allocate(1 * kMiB, kStream);  // the largest small request
  void* b = allocator.allocate(600 * kKiB, kStream);
  EXPECT_EQ(allocator.memory_reserved(), 2 * kMiB);
  EXPECT_EQ(address_of(b), address_of(a) + 1 * kMiB);  // carved from the same segment
  void* c = allocator.allocate(600 * kKiB, kStream);   // 424 KiB are left: a second segment
  EXPECT_EQ(allocator.memory_reserved(), 4 * kMiB);
  EXPECT_EQ(allocator.stats().num_device_allocs, 2u);
  for (void* p : {a, b, c}) allocator.free(p);
  allocator.check_invariants();
}

TEST(CachingAllocator, MediumRequestsGetTwentyMiBSegmentsThatLaterRequestsShare) {
  SimulatedDevice device;
  CachingAllocator allocator(device);
  void* a = allocator.allocate(1 * kMiB + 1, kStream);  // just past the small pool
  EXPECT_EQ(allocator.memory_reserved(), 20 * kMiB);
  void* b = allocator.allocate(9 * kMiB, kStream);
  void* c = allocator.allocate(9 * kMiB, kStream);
  EXPECT_EQ(allocator.memory_reserved(), 20 * kMiB);
  EXPECT_EQ(address_of(b), address_of(a) + 1 * kMiB + 512);
  EXPECT_EQ(address_of(c), address_of(b) + 9 * kMiB);
  EXPECT_EQ(allocator.stats().num_device_allocs, 1u);
  for (void* p : {a, b, c}) allocator.free(p);
  allocator.check_invariants();
}

TEST(CachingAllocator, LargeRequestsGetSegmentsRoundedToTwoMiB) {
  SimulatedDevice device({.capacity = 64 * kGiB});
  CachingAllocator allocator(device);
  std::mt19937_64 rng(nabla::testing::test_seed());
  size_t expected_reserved = 0;
  for (int i = 0; i < 40; ++i) {
    size_t bytes = std::uniform_int_distribution<size_t>(10 * kMiB, 300 * kMiB)(rng);
    void* p = allocator.allocate(bytes, kStream);
    (void)p;  // kept alive so that every request needs its own segment
    expected_reserved += ceil_to(bytes, 2 * kMiB);
    ASSERT_EQ(allocator.memory_reserved(), expected_reserved) << "after " << bytes << " bytes";
  }
  EXPECT_EQ(device.used_bytes(), expected_reserved);
}

TEST(CachingAllocator, BestFitTakesTheSmallestFreeBlockThatFits) {
  SimulatedDevice device;
  CachingAllocator allocator(device);
  void* twelve = allocator.allocate(12 * kMiB, kStream);
  void* sixteen = allocator.allocate(16 * kMiB, kStream);
  void* fourteen = allocator.allocate(14 * kMiB, kStream);
  for (void* p : {twelve, sixteen, fourteen}) allocator.free(p);
  EXPECT_EQ(allocator.allocate(13 * kMiB, kStream), fourteen);
  EXPECT_EQ(allocator.allocate(15 * kMiB, kStream), sixteen);
  EXPECT_EQ(allocator.allocate(11 * kMiB, kStream), twelve);
  EXPECT_EQ(allocator.stats().num_device_allocs, 3u);  // all three came from the cache
  allocator.check_invariants();
}

TEST(CachingAllocator, SplitsLargeBlocksAndReusesTheRemainder) {
  SimulatedDevice device;
  CachingAllocator allocator(device);
  void* whole = allocator.allocate(12 * kMiB, kStream);
  allocator.free(whole);
  void* head = allocator.allocate(4 * kMiB, kStream);
  void* tail = allocator.allocate(8 * kMiB, kStream);
  EXPECT_EQ(head, whole);
  EXPECT_EQ(address_of(tail), address_of(whole) + 4 * kMiB);
  EXPECT_EQ(allocator.memory_reserved(), 12 * kMiB);
  EXPECT_EQ(allocator.memory_allocated(), 12 * kMiB);
  allocator.check_invariants();
}

TEST(CachingAllocator, KeepsLargeRemaindersOfOneMiBOrLessAttached) {
  SimulatedDevice device;
  CachingAllocator allocator(device);
  allocator.free(allocator.allocate(12 * kMiB, kStream));
  void* p = allocator.allocate(11 * kMiB + 512 * kKiB, kStream);
  // The 512 KiB left over are not worth a block of their own: the whole block is handed out.
  EXPECT_EQ(allocator.memory_allocated(), 12 * kMiB);
  EXPECT_EQ(allocator.stats().requested_bytes, 11 * kMiB + 512 * kKiB);
  allocator.free(p);
  allocator.check_invariants();
}

TEST(CachingAllocator, FreedNeighboursMergeInAddressOrder) {
  SimulatedDevice device;
  CachingAllocator allocator(device);
  // Four 512 KiB blocks fill one 2 MiB small segment, in address order.
  std::vector<void*> q;
  for (int i = 0; i < 4; ++i) q.push_back(allocator.allocate(512 * kKiB, kStream));
  for (size_t i = 1; i < 4; ++i) EXPECT_EQ(address_of(q[i]), address_of(q[0]) + i * 512 * kKiB);
  allocator.free(q[0]);
  allocator.free(q[2]);
  // Two free 512 KiB holes that are not adjacent: a 1 MiB request fits neither.
  void* elsewhere = allocator.allocate(1 * kMiB, kStream);
  EXPECT_EQ(allocator.stats().num_device_allocs, 2u);
  allocator.free(elsewhere);
  // Freeing the block between them joins all three into one 1.5 MiB block at q[0].
  allocator.free(q[1]);
  nlohmann::json segment = segment_holding(snapshot_of(allocator), q[0]);
  ASSERT_EQ(segment["blocks"].size(), 2u);
  EXPECT_EQ(segment["blocks"][0]["size"], 1536 * kKiB);
  EXPECT_EQ(segment["blocks"][0]["state"], "free");
  EXPECT_EQ(segment["blocks"][1]["state"], "allocated");
  EXPECT_EQ(allocator.allocate(1 * kMiB, kStream), q[0]);  // best fit: 1.5 MiB beats the free 2 MiB segment
  allocator.check_invariants();
}

TEST(CachingAllocator, FullyMergedSegmentsAreWhatEmptyCacheReturns) {
  SimulatedDevice device;
  CachingAllocator allocator(device);
  void* kept = allocator.allocate(30 * kMiB, kStream);
  std::vector<void*> small;
  for (int i = 0; i < 8; ++i) small.push_back(allocator.allocate(200 * kKiB, kStream));
  for (void* p : small) allocator.free(p);
  EXPECT_EQ(allocator.memory_reserved(), 32 * kMiB);
  allocator.empty_cache();
  EXPECT_EQ(allocator.memory_reserved(), 30 * kMiB);  // the live block's segment stays
  EXPECT_EQ(device.used_bytes(), 30 * kMiB);
  allocator.free(kept);
  allocator.empty_cache();
  EXPECT_EQ(allocator.memory_reserved(), 0u);
  EXPECT_EQ(device.live_allocations(), 0u);
  EXPECT_EQ(allocator.stats().num_device_frees, 2u);
}

TEST(CachingAllocator, BlocksFreedOnAStreamAreReusedOnlyOnThatStream) {
  SimulatedDevice device;
  CachingAllocator allocator(device);
  void* p = allocator.allocate(4 * kMiB, kStream);
  allocator.free(p);
  void* q = allocator.allocate(4 * kMiB, kOtherStream);
  EXPECT_NE(q, p);
  EXPECT_EQ(allocator.stats().num_device_allocs, 2u);
  EXPECT_EQ(allocator.allocate(4 * kMiB, kStream), p);
  allocator.check_invariants();
}

TEST(CachingAllocator, RecordStreamDelaysReuseUntilTheOtherStreamsEventCompletes) {
  SimulatedDevice device;
  CachingAllocator allocator(device);
  void* p = allocator.allocate(4 * kMiB, kStream);
  allocator.record_stream(p, kOtherStream);
  allocator.record_stream(p, kOtherStream);  // naming a stream twice needs one event
  allocator.record_stream(p, kStream);       // its own stream needs none
  allocator.free(p);
  EXPECT_EQ(device.counts().event_records, 1u);
  EXPECT_EQ(allocator.stats().active_bytes, 4 * kMiB);  // freed, but still in use on the other stream
  EXPECT_EQ(allocator.memory_allocated(), 0u);
  void* q = allocator.allocate(4 * kMiB, kStream);
  EXPECT_NE(q, p);  // the other stream may still be reading p
  EXPECT_EQ(snapshot_of(allocator)["segments"][0]["blocks"][0]["state"], "pending_event");
  device.complete_events_on(kOtherStream);
  void* r = allocator.allocate(4 * kMiB, kStream);  // the allocation polls the event
  EXPECT_EQ(r, p);
  EXPECT_EQ(device.live_events(), 0u);
  EXPECT_EQ(device.counts().event_synchronizations, 0u);  // polling never blocks
  allocator.check_invariants();
}

TEST(CachingAllocator, BlockUsedOnSeveralStreamsWaitsForAllOfThem) {
  SimulatedDevice device;
  CachingAllocator allocator(device);
  void* p = allocator.allocate(4 * kMiB, kStream);
  allocator.record_stream(p, 7);
  allocator.record_stream(p, 8);
  allocator.free(p);
  device.complete_events_on(7);
  EXPECT_NE(allocator.allocate(4 * kMiB, kStream), p);
  device.complete_events_on(8);
  EXPECT_EQ(allocator.allocate(4 * kMiB, kStream), p);
  allocator.check_invariants();
}

TEST(CachingAllocator, EmptyCacheWaitsForPendingEventsThenFreesTheSegment) {
  SimulatedDevice device;
  CachingAllocator allocator(device);
  void* p = allocator.allocate(4 * kMiB, kStream);
  allocator.record_stream(p, kOtherStream);
  allocator.free(p);
  allocator.empty_cache();
  EXPECT_EQ(device.counts().event_synchronizations, 1u);
  EXPECT_EQ(allocator.memory_reserved(), 0u);
  EXPECT_EQ(device.live_events(), 0u);
}

TEST(CachingAllocator, MaxSplitSizeKeepsOversizeBlocksWhole) {
  SimulatedDevice device;
  CachingAllocator allocator(device, parse_alloc_config("max_split_size_mb:64"));
  void* big = allocator.allocate(100 * kMiB, kStream);
  allocator.free(big);
  // A request under the limit may not nibble at the 100 MiB block: it gets its own segment.
  void* small = allocator.allocate(30 * kMiB, kStream);
  EXPECT_NE(small, big);
  EXPECT_EQ(allocator.memory_reserved(), 130 * kMiB);
  // A request over the limit takes the block whole when it wastes less than 20 MiB ...
  void* close = allocator.allocate(90 * kMiB, kStream);
  EXPECT_EQ(close, big);
  EXPECT_EQ(allocator.memory_allocated(), 130 * kMiB);
  allocator.free(close);
  // ... and not when it would waste 20 MiB or more.
  void* far = allocator.allocate(80 * kMiB, kStream);
  EXPECT_NE(far, big);
  EXPECT_EQ(allocator.memory_reserved(), 210 * kMiB);
  allocator.check_invariants();
}

TEST(CachingAllocator, WithoutMaxSplitSizeBigBlocksAreSplit) {
  SimulatedDevice device;
  CachingAllocator allocator(device);
  void* big = allocator.allocate(100 * kMiB, kStream);
  allocator.free(big);
  EXPECT_EQ(allocator.allocate(30 * kMiB, kStream), big);
  EXPECT_EQ(allocator.memory_reserved(), 100 * kMiB);
}

TEST(CachingAllocator, GarbageCollectionFreesLeastRecentlyUsedSegmentsFirst) {
  SimulatedDevice device({.capacity = 1 * kGiB});
  CachingAllocator allocator(device, {.garbage_collection_threshold = 0.5});  // target: 512 MiB
  void* a = allocator.allocate(100 * kMiB, 1);
  void* b = allocator.allocate(100 * kMiB, 2);
  void* c = allocator.allocate(100 * kMiB, 3);
  void* d = allocator.allocate(100 * kMiB, 4);
  allocator.free(b);  // least recently used
  allocator.free(a);
  allocator.free(c);
  (void)d;
  // 400 MiB reserved + 200 MiB more would pass 512 MiB: b's segment goes, which is enough.
  void* e = allocator.allocate(200 * kMiB, 5);
  EXPECT_EQ(allocator.memory_reserved(), 500 * kMiB);
  EXPECT_EQ(allocator.stats().num_device_frees, 1u);
  EXPECT_EQ(allocator.stats().num_alloc_retries, 0u);  // collection is not an out-of-memory retry
  EXPECT_EQ(allocator.allocate(100 * kMiB, 1), a);     // a and c are still cached
  EXPECT_EQ(allocator.allocate(100 * kMiB, 3), c);
  allocator.free(e);
  allocator.check_invariants();
}

TEST(CachingAllocator, WithoutGarbageCollectionTheCacheIsKept) {
  SimulatedDevice device({.capacity = 1 * kGiB});
  CachingAllocator allocator(device);
  for (StreamId s = 1; s <= 4; ++s) allocator.free(allocator.allocate(100 * kMiB, s));
  allocator.allocate(200 * kMiB, 5);
  EXPECT_EQ(allocator.memory_reserved(), 600 * kMiB);
  EXPECT_EQ(allocator.stats().num_device_frees, 0u);
}

TEST(CachingAllocator, GarbageCollectionThresholdIsRelativeToTheMemoryFraction) {
  SimulatedDevice device({.capacity = 1 * kGiB});
  CachingAllocator allocator(device, {.garbage_collection_threshold = 0.5});
  allocator.set_memory_fraction(0.5);  // limit 512 MiB, collection above 256 MiB
  allocator.free(allocator.allocate(100 * kMiB, 1));
  allocator.free(allocator.allocate(100 * kMiB, 2));
  allocator.allocate(100 * kMiB, 3);  // 300 MiB would pass 256 MiB: stream 1's segment goes
  EXPECT_EQ(allocator.memory_reserved(), 200 * kMiB);
  EXPECT_EQ(allocator.stats().num_device_frees, 1u);
}

TEST(CachingAllocator, ZeroBytesGiveNullAndFreeingNullIsANoOp) {
  SimulatedDevice device;
  CachingAllocator allocator(device);
  EXPECT_EQ(allocator.allocate(0, kStream), nullptr);
  allocator.free(nullptr);
  EXPECT_EQ(allocator.stats().num_allocs, 0u);
  EXPECT_EQ(device.counts().allocate_calls, 0u);
}

TEST(CachingAllocator, FreeingAnUnknownPointerIsAnError) {
  SimulatedDevice device;
  CachingAllocator allocator(device);
  void* p = allocator.allocate(1000, kStream);
  allocator.free(p);
  EXPECT_NABLA_ERROR(allocator.free(p), "was not allocated by this allocator, or was freed already");
  EXPECT_NABLA_ERROR(allocator.record_stream(p, kOtherStream), "not a live allocation");
}

TEST(CachingAllocator, DestructorGivesEverythingBackToTheDevice) {
  SimulatedDevice device;
  {
    CachingAllocator allocator(device, {.expandable_segments = true});
    allocator.allocate(100, kStream);
    allocator.allocate(50 * kMiB, kStream);
    void* p = allocator.allocate(3 * kMiB, kOtherStream);
    allocator.record_stream(p, 9);
    allocator.free(p);
  }
  EXPECT_EQ(device.used_bytes(), 0u);
  EXPECT_EQ(device.live_allocations(), 0u);
  EXPECT_EQ(device.live_events(), 0u);
}

}  // namespace
}  // namespace nabla::cuda
