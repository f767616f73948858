// Public header. A caching allocator of page-locked (pinned) host memory, for the data loader's
// batch buffers and for asynchronous host-to-device copies.
//
// Pinned memory is expensive to allocate (cudaHostAlloc maps pages for the device) and a copy
// from it returns before the device has read it. So freed blocks are cached by size, and a block
// used by an in-flight copy is reused only after an event recorded on the copy's stream has
// completed (record_pinned_use, which the copy path calls for you).
#pragma once

#include <cstddef>

#include "nabla/core/allocator.h"
#include "nabla/core/cuda/stream.h"

namespace nabla::cuda {

// Host memory (Device::cpu()) that is page-locked. Sizes round up to a power of two (>= 512 B).
Allocator& pinned_allocator();
// True when `ptr` lies inside a block from the pinned allocator.
bool is_pinned(const void* ptr);
// The block containing `ptr` is not handed out again until `stream` has passed this point.
void record_pinned_use(const void* ptr, Stream stream);

struct PinnedStats {
  size_t allocated_bytes = 0;  // in blocks handed out now
  size_t cached_bytes = 0;     // pinned by cudaHostAlloc in total
  size_t host_alloc_calls = 0;
};
PinnedStats pinned_stats();
// Returns every free cached block to the driver (blocks still in use stay).
void pinned_empty_cache();

}  // namespace nabla::cuda
