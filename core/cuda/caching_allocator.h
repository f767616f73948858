// Internal (core/cuda). CachingAllocator: the caching policy for one CUDA device's memory.
//
// Asking the driver for memory (cudaMalloc) is slow and cudaFree synchronizes the device, so the
// allocator keeps the segments it gets and carves blocks out of them, the way PyTorch's caching
// allocator does. This class is pure policy: it reaches the device only through DeviceMemory
// (device_memory.h), so every path runs in CPU tests against SimulatedDevice. The algorithm is
// summarized at the top of caching_allocator.cpp.
//
// Thread-safe: one mutex guards all state, and DeviceMemory is only called with it held.
//
// Note [Expandable segments]
// With expandable_segments:true (and a device that supports it), large-pool blocks of a stream
// come from one segment per stream: a virtual address range as big as the device, of which only a
// prefix is backed by physical memory. When no cached block fits, the allocator maps more pages at
// the end of that prefix, so the free tail block grows in place instead of a new segment appearing
// beside the old ones (which is what fragments memory when request sizes vary). Freeing cache
// unmaps whole free pages at the end of the prefix. Small-pool requests and private pools still use
// ordinary segments.
//
// Note [Private pools for graph capture]
// A captured CUDA graph replays with the addresses it saw during capture, so the memory it used
// must not be handed to anyone else while the graph lives. begin_allocate_to_pool(id, stream)
// routes the stream's allocations to private pool `id` until end_allocate_to_pool(id); blocks of a
// private pool only ever serve allocations routed to that pool, and freed ones return to it. The
// pool keeps its segments until release_pool(id), after which they are ordinary cache. While any
// capture is underway the allocator neither queries nor synchronizes events and never frees device
// memory (both are illegal during capture): frees that need cross-stream events are deferred until
// the last capture ends, and an allocation that does not fit throws OutOfMemoryError at once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "nabla/core/cuda/alloc_config.h"
#include "nabla/core/cuda/device_memory.h"
#include "nabla/core/memory_category.h"

namespace nabla::cuda {

// Identifies a private memory pool (Note [Private pools for graph capture]); 0 is not an id.
using PoolId = uint64_t;

struct MemoryStats {
  size_t allocated_bytes = 0;  // in blocks handed out (sizes rounded up to 512 bytes)
  size_t requested_bytes = 0;  // what callers asked for
  size_t active_bytes = 0;     // allocated, plus freed blocks still waiting for another stream
  size_t reserved_bytes = 0;   // held from the device: segments plus mapped expandable memory
  size_t peak_allocated_bytes = 0;
  size_t peak_requested_bytes = 0;
  size_t peak_active_bytes = 0;
  size_t peak_reserved_bytes = 0;
  size_t num_segments = 0;
  size_t num_allocated_blocks = 0;
  size_t num_cached_blocks = 0;  // free blocks ready for reuse
  uint64_t num_allocs = 0;
  uint64_t num_frees = 0;
  uint64_t num_device_allocs = 0;  // successful cudaMalloc (or map_more) calls
  uint64_t num_device_frees = 0;   // cudaFree (or unmap_tail) calls
  uint64_t num_alloc_retries = 0;  // allocations retried after freeing the cache
  uint64_t num_ooms = 0;           // OutOfMemoryErrors thrown
};

class CachingAllocator {
 public:
  // `device` must outlive the allocator. `device_index` only names the device in messages.
  explicit CachingAllocator(DeviceMemory& device, AllocConfig config = {}, int device_index = 0);
  // Gives every segment back to the device, even ones with blocks still allocated.
  ~CachingAllocator();
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // A block of at least `bytes` for use on `stream`; nullptr for 0 bytes. Throws
  // nabla::OutOfMemoryError when neither the cache nor the device can satisfy it.
  void* allocate(size_t bytes, StreamId stream);
  // Returns a block to the cache. It is reusable at once on its own stream; if record_stream()
  // named other streams, only once work queued on them so far has finished. nullptr is a no-op.
  void free(void* ptr);
  // Marks the block at `ptr` as used by `stream` too, so that free() waits for that stream.
  void record_stream(void* ptr, StreamId stream);

  // Gives all fully free cached memory back to the device (waits for pending cross-stream frees).
  void empty_cache();
  // Caps reserved memory at fraction * total device memory, 0 < fraction <= 1.
  void set_memory_fraction(double fraction);

  size_t memory_allocated() const;
  size_t memory_reserved() const;
  size_t max_memory_allocated() const;
  size_t max_memory_reserved() const;
  void reset_peak_memory_stats();
  MemoryStats stats() const;
  // Allocated bytes by the MemoryCategory current when each block was handed out (block sizes, so
  // they sum to memory_allocated()), plus cached = reserved - allocated. reset_peak_memory_stats()
  // resets its peaks too.
  MemoryCategoryStats category_stats() const;
  // A readable table of the stats, counters and configuration.
  std::string memory_summary() const;
  // JSON: totals and every segment (address, size, stream, pool, allocated/active bytes) with its
  // blocks (address, size, requested size, state allocated | free | pending_event).
  std::string memory_snapshot() const;

  // Note [Private pools for graph capture].
  void begin_allocate_to_pool(PoolId pool, StreamId stream);
  void end_allocate_to_pool(PoolId pool);
  void release_pool(PoolId pool);

  const AllocConfig& config() const { return config_; }
  // True when large blocks come from expandable segments (configured and supported).
  bool uses_expandable_segments() const { return use_expandable_; }

  // Checks the internal invariants (block lists, pools, stats); a failure throws. For tests.
  void check_invariants() const;

 private:
  struct Block;
  struct BlockOrder;
  struct BlockPool;
  struct Segment;
  struct PrivatePool;

  BlockPool& pool_for(size_t size, StreamId stream);
  Block* find_free_block(BlockPool& pool, StreamId stream, size_t size);
  Block* get_more_memory(BlockPool& pool, StreamId stream, size_t size, size_t requested);
  Block* new_segment(BlockPool& pool, StreamId stream, size_t size);
  Block* expand_segment(StreamId stream, size_t size);
  bool fits_under_limit(size_t more_bytes) const;
  void* hand_out(Block* block, size_t size, size_t requested);
  bool should_split(const Block& block, size_t size) const;
  void free_block(Block* block);
  void insert_events(Block* block);
  void process_events();
  void synchronize_events();
  size_t releasable_bytes(const Segment& segment) const;
  void release_segment_memory(Segment& segment);
  void release_cached_memory();
  void collect_garbage(size_t more_bytes);
  void delete_segment(Segment& segment);
  void record_peaks();
  std::string out_of_memory_message(size_t requested, StreamId stream) const;

  DeviceMemory& device_;
  const AllocConfig config_;
  const int device_index_;
  const bool use_expandable_;
  mutable std::mutex mutex_;

  std::unique_ptr<BlockPool> small_pool_;
  std::unique_ptr<BlockPool> large_pool_;
  std::map<PoolId, std::unique_ptr<PrivatePool>> private_pools_;
  std::vector<std::pair<PoolId, StreamId>> captures_;  // streams routed to private pools

  std::map<uintptr_t, std::unique_ptr<Segment>> segments_;  // by base address
  std::map<StreamId, Segment*> expandable_segments_;        // the large pool's, one per stream
  std::unordered_map<uintptr_t, Block*> allocated_blocks_;  // by address

  // Cross-stream frees: per stream, events in record order (they complete in that order).
  std::map<StreamId, std::deque<std::pair<EventId, Block*>>> stream_events_;
  std::vector<Block*> deferred_until_no_capture_;

  nabla::detail::CategoryCounters categories_;  // updated with mutex_ held, like stats_
  size_t memory_limit_;                         // reserved memory never exceeds this
  double fraction_ = 0;                         // 0 until set_memory_fraction
  uint64_t use_clock_ = 0;  // ticks on every use of a segment, for least-recently-used order
  MemoryStats stats_;
};

using nabla::format_bytes;  // core/memory_category.h

}  // namespace nabla::cuda
