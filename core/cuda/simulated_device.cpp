// SimulatedDevice: bookkeeping only. Misuse by the policy fails an NABLA_ASSERT, so a test that
// drives the allocator wrongly fails loudly instead of passing on corrupted accounting.
#include "nabla/core/cuda/simulated_device.h"

#include <algorithm>

#include "nabla/core/error.h"

namespace nabla::cuda {

namespace {
constexpr uintptr_t kAlignment = uintptr_t{2} << 20;  // like cudaMalloc's large-allocation alignment
}

SimulatedDevice::SimulatedDevice(SimulatedDeviceOptions options) : options_(options) {
  NABLA_CHECK(!options.supports_expandable || options.granularity > 0,
              "SimulatedDevice: expandable segments need a nonzero granularity");
}

size_t SimulatedDevice::free_memory() const {
  std::lock_guard lock(mutex_);
  return options_.capacity - std::min(options_.capacity, used_ + external_usage_);
}

bool SimulatedDevice::take_memory(size_t bytes) {
  const bool injected = failures_to_inject_ > 0;
  if (injected) --failures_to_inject_;
  if (injected || bytes > options_.capacity || used_ + external_usage_ > options_.capacity - bytes) {
    ++counts_.failed_allocations;
    return false;
  }
  used_ += bytes;
  peak_used_ = std::max(peak_used_, used_);
  return true;
}

uintptr_t SimulatedDevice::next_address(size_t bytes) {
  uintptr_t address = next_address_;
  // A gap after each range, so that two ranges are never adjacent by accident.
  next_address_ += (bytes + kAlignment - 1) / kAlignment * kAlignment + kAlignment;
  return address;
}

void* SimulatedDevice::allocate(size_t bytes) {
  std::lock_guard lock(mutex_);
  ++counts_.allocate_calls;
  NABLA_ASSERT(bytes > 0, "allocate(0)");
  if (!take_memory(bytes)) return nullptr;
  uintptr_t address = next_address(bytes);
  segments_.emplace(address, bytes);
  return reinterpret_cast<void*>(address);  // NOLINT(performance-no-int-to-ptr): fake
}

void SimulatedDevice::free(void* ptr, size_t bytes) {
  std::lock_guard lock(mutex_);
  ++counts_.free_calls;
  auto it = segments_.find(reinterpret_cast<uintptr_t>(ptr));
  NABLA_ASSERT(it != segments_.end(), "free of {} which is not a live allocation", ptr);
  NABLA_ASSERT(it->second == bytes, "free of {} with {} bytes, allocated with {}", ptr, bytes, it->second);
  used_ -= bytes;
  segments_.erase(it);
}

EventId SimulatedDevice::create_event() {
  std::lock_guard lock(mutex_);
  ++counts_.events_created;
  EventId id = next_event_++;
  events_.emplace(id, Event{});
  return id;
}

void SimulatedDevice::record_event(EventId event, StreamId stream) {
  std::lock_guard lock(mutex_);
  ++counts_.event_records;
  Event& e = events_.at(event);
  e = Event{.recorded = true, .complete = false, .stream = stream};
}

bool SimulatedDevice::query_event(EventId event) {
  std::lock_guard lock(mutex_);
  ++counts_.event_queries;
  Event& e = events_.at(event);
  // Like cudaEventQuery, an event never recorded counts as complete.
  if (!e.recorded) return true;
  ++e.queries;
  if (options_.event_completes_after_queries > 0 && e.queries >= options_.event_completes_after_queries) {
    e.complete = true;
  }
  return e.complete;
}

void SimulatedDevice::synchronize_event(EventId event) {
  std::lock_guard lock(mutex_);
  ++counts_.event_synchronizations;
  events_.at(event).complete = true;  // the host waited until the stream got there
}

void SimulatedDevice::destroy_event(EventId event) {
  std::lock_guard lock(mutex_);
  ++counts_.events_destroyed;
  NABLA_ASSERT(events_.erase(event) == 1, "destroy of unknown event {}", event);
}

void* SimulatedDevice::reserve_virtual(size_t bytes) {
  std::lock_guard lock(mutex_);
  NABLA_ASSERT(options_.supports_expandable, "reserve_virtual on a device without expandable segments");
  NABLA_ASSERT(bytes > 0 && bytes % options_.granularity == 0, "reserve_virtual({})", bytes);
  uintptr_t address = next_address(bytes);
  reservations_.emplace(address, Reservation{.size = bytes});
  return reinterpret_cast<void*>(address);  // NOLINT(performance-no-int-to-ptr): fake
}

bool SimulatedDevice::map_more(void* base, size_t mapped, size_t bytes) {
  std::lock_guard lock(mutex_);
  ++counts_.map_calls;
  auto it = reservations_.find(reinterpret_cast<uintptr_t>(base));
  NABLA_ASSERT(it != reservations_.end(), "map_more on {} which is not a reservation", base);
  Reservation& r = it->second;
  NABLA_ASSERT(mapped == r.mapped, "map_more at offset {} but {} bytes are mapped", mapped, r.mapped);
  NABLA_ASSERT(bytes > 0 && bytes % options_.granularity == 0 && bytes <= r.size - r.mapped,
               "map_more of {} bytes", bytes);
  if (!take_memory(bytes)) return false;
  r.mapped += bytes;
  return true;
}

void SimulatedDevice::unmap_tail(void* base, size_t mapped, size_t bytes) {
  std::lock_guard lock(mutex_);
  ++counts_.unmap_calls;
  auto it = reservations_.find(reinterpret_cast<uintptr_t>(base));
  NABLA_ASSERT(it != reservations_.end(), "unmap_tail on {} which is not a reservation", base);
  Reservation& r = it->second;
  NABLA_ASSERT(mapped == r.mapped, "unmap_tail with {} mapped but {} bytes are mapped", mapped, r.mapped);
  NABLA_ASSERT(bytes > 0 && bytes % options_.granularity == 0 && bytes <= r.mapped, "unmap_tail of {} bytes",
               bytes);
  r.mapped -= bytes;
  used_ -= bytes;
}

void SimulatedDevice::release_virtual(void* base, size_t bytes) {
  std::lock_guard lock(mutex_);
  auto it = reservations_.find(reinterpret_cast<uintptr_t>(base));
  NABLA_ASSERT(it != reservations_.end() && it->second.size == bytes, "release_virtual({}, {})", base, bytes);
  NABLA_ASSERT(it->second.mapped == 0, "release_virtual with {} bytes still mapped", it->second.mapped);
  reservations_.erase(it);
}

void SimulatedDevice::fail_next_allocations(int count) {
  std::lock_guard lock(mutex_);
  failures_to_inject_ = count;
}

void SimulatedDevice::set_external_usage(size_t bytes) {
  std::lock_guard lock(mutex_);
  external_usage_ = bytes;
}

void SimulatedDevice::complete_events_on(StreamId stream) {
  std::lock_guard lock(mutex_);
  for (auto& [id, e] : events_) {
    if (e.recorded && e.stream == stream) e.complete = true;
  }
}

void SimulatedDevice::complete_all_events() {
  std::lock_guard lock(mutex_);
  for (auto& [id, e] : events_) e.complete = true;
}

size_t SimulatedDevice::used_bytes() const {
  std::lock_guard lock(mutex_);
  return used_;
}

size_t SimulatedDevice::peak_used_bytes() const {
  std::lock_guard lock(mutex_);
  return peak_used_;
}

size_t SimulatedDevice::live_allocations() const {
  std::lock_guard lock(mutex_);
  return segments_.size() + reservations_.size();
}

size_t SimulatedDevice::live_events() const {
  std::lock_guard lock(mutex_);
  return events_.size();
}

SimulatedDeviceCounts SimulatedDevice::counts() const {
  std::lock_guard lock(mutex_);
  return counts_;
}

}  // namespace nabla::cuda
