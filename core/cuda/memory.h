// Public header. The CUDA memory API: statistics, limits and reports of the device allocator.
//
// Device memory comes from a caching allocator by default (core/cuda/caching_allocator.h);
// NABLA_CUDA_ALLOC_CONF="backend:native" switches to a cudaMalloc/cudaFree per tensor (for
// compute-sanitizer). Other keys: max_split_size_mb, garbage_collection_threshold and
// expandable_segments (see alloc_config.h). A bad value is an error at the first allocation.
// Every function takes a device index; -1 means the current device.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "nabla/core/cuda/stream.h"
#include "nabla/core/tensor.h"

namespace nabla::cuda {

size_t memory_allocated(int device = -1);
size_t max_memory_allocated(int device = -1);
size_t memory_reserved(int device = -1);
size_t max_memory_reserved(int device = -1);
void reset_peak_memory_stats(int device = -1);

struct AllocatorCounts {
  uint64_t allocations = 0;
  uint64_t frees = 0;
  uint64_t device_allocations = 0;  // cudaMalloc (or mapping) calls
  uint64_t retries = 0;             // allocations retried after freeing the cache
  uint64_t ooms = 0;
};
AllocatorCounts allocator_counts(int device = -1);

// Returns unused cached memory to the device (all devices).
void empty_cache();
// A hard cap on reserved memory: fraction of the device's total memory, in (0, 1].
void set_memory_fraction(double fraction, int device = -1);
// "caching" or "native".
std::string allocator_backend();
// A readable report, and a JSON snapshot of segments and blocks.
std::string memory_summary(int device = -1);
std::string memory_snapshot(int device = -1);

// Tells the allocator that `t`'s memory is also used by work on `stream`, so that it is not
// reused after `t` is freed until that stream has passed the work queued so far.
void record_stream(const Tensor& t, Stream stream);

}  // namespace nabla::cuda
