// Internal (core/cuda). SimulatedDevice: a DeviceMemory with a fixed capacity and no GPU, so that
// every path of the caching allocator's policy runs in CPU tests.
//
// It hands out fake addresses from a fake address space (never dereference them), tracks usage
// against its capacity, and checks every call for misuse (a double free, a free of the wrong size,
// a map that is not at the end of the mapped prefix): such a call is a bug in the policy and
// throws. Fault injection: allocations can be made to fail on demand, other processes can be made
// to hold memory, and events complete only when the test says so (or after a number of queries).
#pragma once

#include <map>
#include <mutex>

#include "nabla/core/cuda/device_memory.h"

namespace nabla::cuda {

struct SimulatedDeviceOptions {
  size_t capacity = size_t{8} << 30;
  bool supports_expandable = true;
  size_t granularity = size_t{2} << 20;  // of expandable mappings
  // A recorded event completes after this many queries of it; 0: only when completed explicitly
  // (complete_events_on, complete_all_events) or synchronized.
  int event_completes_after_queries = 0;
};

// What the device was asked to do, for tests to check the policy against.
struct SimulatedDeviceCounts {
  size_t allocate_calls = 0;      // including failed ones
  size_t failed_allocations = 0;  // allocate and map_more calls that ran out of memory
  size_t free_calls = 0;
  size_t map_calls = 0;
  size_t unmap_calls = 0;
  size_t events_created = 0;
  size_t events_destroyed = 0;
  size_t event_records = 0;
  size_t event_queries = 0;
  size_t event_synchronizations = 0;
};

class SimulatedDevice : public DeviceMemory {
 public:
  explicit SimulatedDevice(SimulatedDeviceOptions options = {});

  void* allocate(size_t bytes) override;
  void free(void* ptr, size_t bytes) override;
  size_t total_memory() const override { return options_.capacity; }
  size_t free_memory() const override;

  EventId create_event() override;
  void record_event(EventId event, StreamId stream) override;
  bool query_event(EventId event) override;
  void synchronize_event(EventId event) override;
  void destroy_event(EventId event) override;

  bool supports_expandable() const override { return options_.supports_expandable; }
  size_t expandable_granularity() const override { return options_.granularity; }
  void* reserve_virtual(size_t bytes) override;
  bool map_more(void* base, size_t mapped, size_t bytes) override;
  void unmap_tail(void* base, size_t mapped, size_t bytes) override;
  void release_virtual(void* base, size_t bytes) override;

  // --- Fault injection. ---
  // The next `count` allocate / map_more calls fail as if the device were out of memory.
  void fail_next_allocations(int count);
  // Memory held by someone else (another process): it lowers free_memory().
  void set_external_usage(size_t bytes);
  // Completes every event recorded so far on `stream` (its queued work has finished).
  void complete_events_on(StreamId stream);
  void complete_all_events();

  // --- Inspection. ---
  size_t used_bytes() const;  // by segments and mappings, excluding external usage
  size_t peak_used_bytes() const;
  size_t live_allocations() const;  // segments plus reservations
  size_t live_events() const;
  SimulatedDeviceCounts counts() const;

 private:
  struct Event {
    bool recorded = false;
    bool complete = false;
    StreamId stream = 0;
    int queries = 0;
  };
  struct Reservation {
    size_t size = 0;
    size_t mapped = 0;
  };

  bool take_memory(size_t bytes);  // false when out of memory (or told to fail)
  uintptr_t next_address(size_t bytes);

  const SimulatedDeviceOptions options_;
  mutable std::mutex mutex_;
  std::map<uintptr_t, size_t> segments_;  // live allocations: address -> size
  std::map<uintptr_t, Reservation> reservations_;
  std::map<EventId, Event> events_;
  EventId next_event_ = 1;
  uintptr_t next_address_ = uintptr_t{1} << 44;  // far from anything real, and never reused
  size_t used_ = 0;
  size_t peak_used_ = 0;
  size_t external_usage_ = 0;
  int failures_to_inject_ = 0;
  SimulatedDeviceCounts counts_;
};

}  // namespace nabla::cuda
