// Internal (core/cuda). DeviceMemory: the narrow mechanism interface the caching allocator's policy
// talks to. Everything here is plain C++ (no CUDA headers) so that the policy builds, and is
// tested against SimulatedDevice, without a GPU.
//
// The policy never touches CUDA itself: it asks this interface for raw segments, for events that
// mark "all work queued on a stream so far", and, optionally, for virtual-memory ranges that grow
// in place (Note [Expandable segments] in caching_allocator.h). Streams and events are opaque
// integers; the CUDA implementation casts its cudaStream_t / cudaEvent_t to and from them.
//
// Threading: the allocator calls this interface with its own mutex held, one call at a time.
#pragma once

#include <cstddef>
#include <cstdint>

namespace nabla::cuda {

// An opaque stream handle (a cudaStream_t on the real device; 0 is the legacy default stream).
using StreamId = uintptr_t;
// An opaque event handle from DeviceMemory::create_event (a cudaEvent_t on the real device).
using EventId = uintptr_t;

class DeviceMemory {
 public:
  virtual ~DeviceMemory() = default;

  // --- Segments. -------------------------------------------------------------------------------

  // Allocates `bytes` of device memory (cudaMalloc). Returns nullptr when the device is out of
  // memory; never throws for that (the policy then frees its cache and retries). Other failures
  // throw nabla::Error.
  virtual void* allocate(size_t bytes) = 0;
  // Frees memory from allocate(); `bytes` is the size that was asked for (cudaFree). May block
  // until the device is idle, which is why the policy never calls it during graph capture.
  virtual void free(void* ptr, size_t bytes) = 0;

  // The device's capacity and the bytes it could still give out (cudaMemGetInfo).
  virtual size_t total_memory() const = 0;
  virtual size_t free_memory() const = 0;

  // --- Events. ---------------------------------------------------------------------------------
  // The policy uses an event to learn when work queued on another stream before a free has
  // finished. Events are created, recorded once, queried until complete (or synchronized), then
  // destroyed.

  virtual EventId create_event() = 0;
  // Records `event` on `stream`: it completes once all work queued on the stream so far is done.
  virtual void record_event(EventId event, StreamId stream) = 0;
  // True once the recorded work has finished. Never blocks.
  virtual bool query_event(EventId event) = 0;
  // Blocks the host until the event has completed.
  virtual void synchronize_event(EventId event) = 0;
  virtual void destroy_event(EventId event) = 0;

  // --- Expandable segments (optional; see Note [Expandable segments]). -------------------------
  // A range of virtual addresses is reserved once; physical memory is mapped and unmapped only at
  // the end of its mapped prefix [base, base + mapped). The policy always passes the current
  // `mapped` size, so an implementation needs no bookkeeping of its own. All sizes are multiples
  // of expandable_granularity().

  virtual bool supports_expandable() const { return false; }
  // The physical page size that mapping works in (cuMemGetAllocationGranularity).
  virtual size_t expandable_granularity() const { return 0; }
  // Reserves `bytes` of virtual address space with nothing mapped. Returns nullptr when it cannot.
  virtual void* reserve_virtual(size_t bytes) { return nullptr; }
  // Maps `bytes` of new physical memory at [base + mapped, base + mapped + bytes) and makes it
  // accessible. Returns false when the device is out of memory (nothing is then mapped).
  virtual bool map_more(void* base, size_t mapped, size_t bytes) { return false; }
  // Unmaps the last `bytes` of the mapped prefix: [base + mapped - bytes, base + mapped).
  virtual void unmap_tail(void* base, size_t mapped, size_t bytes) {}
  // Gives back a reservation from reserve_virtual(); nothing in it is mapped any more.
  virtual void release_virtual(void* base, size_t bytes) {}
};

}  // namespace nabla::cuda
