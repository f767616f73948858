// Internal to caching_allocator*.cpp: the block, pool and segment records and the size constants.
// Kept out of caching_allocator.h so that its users see only the policy's interface.
#pragma once

#include <set>
#include <tuple>

#include "nabla/core/cuda/caching_allocator.h"

namespace nabla::cuda {

inline constexpr size_t kMiB = size_t{1} << 20;
inline constexpr size_t kMinBlockSize = 512;       // every block size is a multiple of this
inline constexpr size_t kSmallSize = 1 * kMiB;     // requests up to this use the small pool
inline constexpr size_t kSmallBuffer = 2 * kMiB;   // small-pool segments
inline constexpr size_t kLargeBuffer = 20 * kMiB;  // segments for large requests under kMinLargeAlloc
inline constexpr size_t kMinLargeAlloc = 10 * kMiB;
inline constexpr size_t kRoundLarge = 2 * kMiB;  // larger segments round up to this
// Beyond this a request cannot be satisfied on any device; refusing it up front avoids overflow.
inline constexpr size_t kMaxRequest = size_t{1} << 60;

// Addresses are kept as integers (ordered, offset); this turns one back into a device pointer.
inline void* as_pointer(uintptr_t address) {
  return reinterpret_cast<void*>(address);  // NOLINT(performance-no-int-to-ptr)
}

inline size_t round_up(size_t n, size_t multiple) {
  return (n + multiple - 1) / multiple * multiple;
}

enum class BlockState {
  kFree,           // in its pool, reusable by allocations on its stream
  kAllocated,      // handed out
  kPendingEvents,  // freed, but waits for events on other streams (or for a capture to end)
};

// A contiguous piece of a segment. The blocks of a segment form an address-ordered list.
struct CachingAllocator::Block {
  Block() = default;  // a search key for BlockOrder
  // A free block of `segment`, linked between prev and next.
  Block(uintptr_t address, size_t size, Segment* segment, Block* prev, Block* next);

  uintptr_t address = 0;
  size_t size = 0;
  size_t requested = 0;  // what the caller asked for, while allocated
  StreamId stream = 0;   // the segment's stream, copied here for BlockOrder
  Segment* segment = nullptr;
  Block* prev = nullptr;
  Block* next = nullptr;
  BlockState state = BlockState::kFree;
  int pending_events = 0;
  MemoryCategory category = MemoryCategory::other;  // while allocated: what it was allocated for
  std::vector<StreamId> stream_uses;                // other streams named by record_stream
};

// Best fit: order free blocks by (stream, size, address) so that lower_bound({stream, size})
// finds the smallest block of that stream that fits, lowest address first among equals.
struct CachingAllocator::BlockOrder {
  bool operator()(const Block* a, const Block* b) const {
    return std::tie(a->stream, a->size, a->address) < std::tie(b->stream, b->size, b->address);
  }
};

struct CachingAllocator::BlockPool {
  BlockPool(bool small, PoolId owner) : is_small(small), owner(owner) {}
  std::set<Block*, BlockOrder> free_blocks;
  const bool is_small;
  PoolId owner;  // 0 for the shared pools, else the private pool's id
};

struct CachingAllocator::Segment {
  uintptr_t base = 0;
  size_t size = 0;  // bytes backed by device memory (for expandable: the mapped prefix)
  StreamId stream = 0;
  BlockPool* pool = nullptr;
  bool expandable = false;
  size_t virtual_size = 0;  // expandable only: the reserved address range
  uint64_t last_used = 0;   // use_clock_ at the last allocation or free in it
  Block* first = nullptr;   // lowest-address block; nullptr for an expandable one with nothing mapped
};

inline CachingAllocator::Block::Block(uintptr_t address, size_t size, Segment* segment, Block* prev,
                                      Block* next)
    : address(address), size(size), stream(segment->stream), segment(segment), prev(prev), next(next) {}

struct CachingAllocator::PrivatePool {
  explicit PrivatePool(PoolId id) : small(true, id), large(false, id) {}
  BlockPool small;
  BlockPool large;
};

}  // namespace nabla::cuda
