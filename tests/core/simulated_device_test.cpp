// SimulatedDevice: the mock that the caching allocator's tests stand on. It must account memory
// exactly, fail when told, complete events only when told, and refuse misuse.
#include "nabla/core/cuda/simulated_device.h"
#include "test_util.h"

namespace nabla::cuda {
namespace {

constexpr size_t kMiB = size_t{1} << 20;

TEST(SimulatedDevice, TracksUsageAndFailsBeyondCapacity) {
  SimulatedDevice device({.capacity = 100 * kMiB});
  void* a = device.allocate(60 * kMiB);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(device.used_bytes(), 60 * kMiB);
  EXPECT_EQ(device.free_memory(), 40 * kMiB);
  EXPECT_EQ(device.allocate(41 * kMiB), nullptr);  // does not fit
  void* b = device.allocate(40 * kMiB);
  ASSERT_NE(b, nullptr);
  EXPECT_NE(a, b);
  EXPECT_EQ(device.free_memory(), 0u);
  device.free(a, 60 * kMiB);
  device.free(b, 40 * kMiB);
  EXPECT_EQ(device.used_bytes(), 0u);
  EXPECT_EQ(device.peak_used_bytes(), 100 * kMiB);
  EXPECT_EQ(device.counts().failed_allocations, 1u);
  EXPECT_EQ(device.live_allocations(), 0u);
}

TEST(SimulatedDevice, FailsOnDemandAndCountsExternalUsage) {
  SimulatedDevice device({.capacity = 100 * kMiB});
  device.fail_next_allocations(2);
  EXPECT_EQ(device.allocate(kMiB), nullptr);
  EXPECT_EQ(device.allocate(kMiB), nullptr);
  void* p = device.allocate(kMiB);
  EXPECT_NE(p, nullptr);
  device.set_external_usage(90 * kMiB);
  EXPECT_EQ(device.free_memory(), 9 * kMiB);
  EXPECT_EQ(device.allocate(10 * kMiB), nullptr);
  device.free(p, kMiB);
}

TEST(SimulatedDevice, RefusesMisuse) {
  SimulatedDevice device({.capacity = 100 * kMiB});
  void* p = device.allocate(kMiB);
  EXPECT_NABLA_ERROR(device.free(p, 2 * kMiB), "allocated with");
  device.free(p, kMiB);
  EXPECT_NABLA_ERROR(device.free(p, kMiB), "not a live allocation");
}

TEST(SimulatedDevice, EventsCompleteWhenToldOrWhenSynchronized) {
  SimulatedDevice device;
  EventId on_one = device.create_event(), on_two = device.create_event(), unrecorded = device.create_event();
  device.record_event(on_one, 1);
  device.record_event(on_two, 2);
  EXPECT_TRUE(device.query_event(unrecorded));  // as with CUDA, nothing recorded is complete
  EXPECT_FALSE(device.query_event(on_one));
  EXPECT_FALSE(device.query_event(on_two));
  device.complete_events_on(1);
  EXPECT_TRUE(device.query_event(on_one));
  EXPECT_FALSE(device.query_event(on_two));
  device.synchronize_event(on_two);
  EXPECT_TRUE(device.query_event(on_two));
  for (EventId e : {on_one, on_two, unrecorded}) device.destroy_event(e);
  EXPECT_EQ(device.live_events(), 0u);
  EXPECT_EQ(device.counts().event_synchronizations, 1u);
}

TEST(SimulatedDevice, EventsCanCompleteAfterSomeQueries) {
  SimulatedDevice device({.event_completes_after_queries = 3});
  EventId e = device.create_event();
  device.record_event(e, 5);
  EXPECT_FALSE(device.query_event(e));
  EXPECT_FALSE(device.query_event(e));
  EXPECT_TRUE(device.query_event(e));
  device.destroy_event(e);
}

TEST(SimulatedDevice, ExpandableRangesMapAndUnmapOnlyAtTheEnd) {
  SimulatedDevice device({.capacity = 100 * kMiB, .granularity = 2 * kMiB});
  ASSERT_TRUE(device.supports_expandable());
  void* base = device.reserve_virtual(100 * kMiB);
  ASSERT_NE(base, nullptr);
  EXPECT_EQ(device.used_bytes(), 0u);  // reserving costs no memory
  EXPECT_TRUE(device.map_more(base, 0, 10 * kMiB));
  EXPECT_TRUE(device.map_more(base, 10 * kMiB, 4 * kMiB));
  EXPECT_EQ(device.used_bytes(), 14 * kMiB);
  EXPECT_NABLA_ERROR(device.map_more(base, 0, 2 * kMiB), "mapped");        // not at the end
  EXPECT_NABLA_ERROR(device.map_more(base, 14 * kMiB, kMiB), "map_more");  // not whole pages
  EXPECT_NABLA_ERROR(device.release_virtual(base, 100 * kMiB), "still mapped");
  device.set_external_usage(80 * kMiB);
  EXPECT_FALSE(device.map_more(base, 14 * kMiB, 8 * kMiB));  // 14 + 80 + 8 > 100
  device.unmap_tail(base, 14 * kMiB, 14 * kMiB);
  EXPECT_EQ(device.used_bytes(), 0u);
  device.release_virtual(base, 100 * kMiB);
  EXPECT_EQ(device.live_allocations(), 0u);
}

}  // namespace
}  // namespace nabla::cuda
