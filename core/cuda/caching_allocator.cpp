// The caching allocator's policy. The algorithm, in short (after PyTorch's CUDACachingAllocator):
//
// - Sizes. Requests round up to multiples of 512 bytes. Requests of at most 1 MiB come from the
//   small pool, whose segments are 2 MiB; larger ones from the large pool, whose segments are
//   20 MiB for requests under 10 MiB and otherwise the request rounded up to 2 MiB.
// - Best fit. Each pool keeps its free blocks ordered by (stream, size, address); an allocation
//   takes the smallest free block of its own stream that fits and splits off the rest when the
//   rest is worth keeping (at least 512 bytes in the small pool, more than 1 MiB in the large
//   one). A freed block merges with free address neighbours in its segment.
// - Streams. A block belongs to the stream it was allocated on; work on one stream runs in order,
//   so a block freed there is at once reusable there, and only there. record_stream() names other
//   streams that used the block: its free then records an event on each, and the block waits
//   outside the pool until all have completed. Events are polled on each allocation.
// - max_split_size. Blocks of at least that size are never split: requests below it never take
//   one, requests above it take one only when it wastes less than 20 MiB. Long-lived huge blocks
//   then cannot be nibbled into fragments that nothing else fits.
// - No fitting block: if a garbage-collection threshold is set and reserved memory would pass
//   threshold * limit, fully free segments go back to the device, least recently used first. Then
//   a new segment is requested (or the stream's expandable segment grows; Note [Expandable
//   segments]), unless it would pass the memory-fraction limit. If that fails: wait for pending
//   events, give back every fully free segment, and retry once; then throw OutOfMemoryError.
// - Graph capture routes a stream's allocations to a private pool (Note [Private pools for graph
//   capture]); nothing on that path waits for the device or frees device memory.
#include "nabla/core/cuda/caching_allocator.h"

#include <algorithm>
#include <limits>

#include "nabla/core/cuda/caching_allocator_internal.h"
#include "nabla/core/error.h"

namespace nabla::cuda {

namespace {

constexpr size_t kNoLimit = std::numeric_limits<size_t>::max();

// The segment to request from the device for a block of `size` (already rounded).
size_t segment_size_for(size_t size) {
  if (size <= kSmallSize) return kSmallBuffer;
  if (size < kMinLargeAlloc) return kLargeBuffer;
  return round_up(size, kRoundLarge);
}

}  // namespace

CachingAllocator::CachingAllocator(DeviceMemory& device, AllocConfig config, int device_index)
    : device_(device),
      config_(config),
      device_index_(device_index),
      use_expandable_(config.expandable_segments && device.supports_expandable()),
      small_pool_(std::make_unique<BlockPool>(true, 0)),
      large_pool_(std::make_unique<BlockPool>(false, 0)),
      memory_limit_(kNoLimit) {}

CachingAllocator::~CachingAllocator() {
  std::lock_guard lock(mutex_);
  for (auto& [stream, events] : stream_events_) {
    for (auto& [event, block] : events) device_.destroy_event(event);
  }
  for (auto& [base, segment] : segments_) {
    for (Block* block = segment->first; block;) delete std::exchange(block, block->next);
    if (!segment->expandable) {
      device_.free(as_pointer(segment->base), segment->size);
      continue;
    }
    if (segment->size > 0) device_.unmap_tail(as_pointer(base), segment->size, segment->size);
    device_.release_virtual(as_pointer(base), segment->virtual_size);
  }
}

void* CachingAllocator::allocate(size_t bytes, StreamId stream) {
  if (bytes == 0) return nullptr;
  std::lock_guard lock(mutex_);
  if (captures_.empty()) process_events();
  if (bytes > kMaxRequest) {
    ++stats_.num_ooms;
    throw OutOfMemoryError(out_of_memory_message(bytes, stream));
  }
  size_t size = round_up(bytes, kMinBlockSize);
  BlockPool& pool = pool_for(size, stream);
  Block* block = find_free_block(pool, stream, size);
  if (!block) block = get_more_memory(pool, stream, size, bytes);
  return hand_out(block, size, bytes);
}

void CachingAllocator::free(void* ptr) {
  if (!ptr) return;
  std::lock_guard lock(mutex_);
  auto it = allocated_blocks_.find(reinterpret_cast<uintptr_t>(ptr));
  NABLA_CHECK(it != allocated_blocks_.end(),
              "CachingAllocator::free: {} was not allocated by this allocator, or was freed already", ptr);
  Block* block = it->second;
  allocated_blocks_.erase(it);
  stats_.allocated_bytes -= block->size;
  stats_.requested_bytes -= block->requested;
  categories_.sub(block->category, block->size);
  ++stats_.num_frees;
  if (block->stream_uses.empty()) {
    free_block(block);
    return;
  }
  block->state = BlockState::kPendingEvents;
  // Recording an event on a capturing stream would put it into the graph; wait for the capture.
  if (!captures_.empty()) {
    deferred_until_no_capture_.push_back(block);
  } else {
    insert_events(block);
  }
}

void CachingAllocator::record_stream(void* ptr, StreamId stream) {
  std::lock_guard lock(mutex_);
  auto it = allocated_blocks_.find(reinterpret_cast<uintptr_t>(ptr));
  NABLA_CHECK(it != allocated_blocks_.end(),
              "CachingAllocator::record_stream: {} is not a live allocation of this allocator", ptr);
  Block* block = it->second;
  if (stream == block->stream) return;  // its own stream is ordered already
  auto& uses = block->stream_uses;
  if (std::find(uses.begin(), uses.end(), stream) == uses.end()) uses.push_back(stream);
}

CachingAllocator::BlockPool& CachingAllocator::pool_for(size_t size, StreamId stream) {
  for (const auto& [pool_id, capturing_stream] : captures_) {
    if (capturing_stream == stream) {
      PrivatePool& pool = *private_pools_.at(pool_id);
      return size <= kSmallSize ? pool.small : pool.large;
    }
  }
  return size <= kSmallSize ? *small_pool_ : *large_pool_;
}

CachingAllocator::Block* CachingAllocator::find_free_block(BlockPool& pool, StreamId stream, size_t size) {
  Block key;
  key.stream = stream;
  key.size = size;
  auto it = pool.free_blocks.lower_bound(&key);
  if (it == pool.free_blocks.end() || (*it)->stream != stream) return nullptr;
  Block* block = *it;
  // Oversize blocks are never split (should_split), so keep them for requests that nearly fill
  // them. The block found is the smallest that fits, so no other block would pass either.
  const size_t max_split = config_.max_split_size;
  if (!block->segment->expandable && max_split != kNoMaxSplitSize) {
    if (size < max_split && block->size >= max_split) return nullptr;
    if (size >= max_split && block->size >= size + kLargeBuffer) return nullptr;
  }
  pool.free_blocks.erase(it);
  return block;
}

CachingAllocator::Block* CachingAllocator::get_more_memory(BlockPool& pool, StreamId stream, size_t size,
                                                           size_t requested) {
  const bool expandable = use_expandable_ && &pool == large_pool_.get();
  const size_t segment_size =
      expandable ? round_up(size, device_.expandable_granularity()) : segment_size_for(size);
  auto from_device = [&] {
    return expandable ? expand_segment(stream, size) : new_segment(pool, stream, segment_size);
  };
  // During graph capture freeing device memory or waiting on events is illegal, so the cache
  // cannot be trimmed: either the device has room or the allocation fails.
  const bool capturing = !captures_.empty();
  if (!capturing) collect_garbage(segment_size);
  if (Block* block = from_device()) return block;
  if (!capturing) {
    ++stats_.num_alloc_retries;
    release_cached_memory();
    // Waiting for events may have returned a fitting block to the pool.
    if (Block* block = find_free_block(pool, stream, size)) return block;
    if (Block* block = from_device()) return block;
  }
  ++stats_.num_ooms;
  throw OutOfMemoryError(out_of_memory_message(requested, stream));
}

bool CachingAllocator::fits_under_limit(size_t more_bytes) const {
  return more_bytes <= memory_limit_ && stats_.reserved_bytes <= memory_limit_ - more_bytes;
}

CachingAllocator::Block* CachingAllocator::new_segment(BlockPool& pool, StreamId stream, size_t size) {
  if (!fits_under_limit(size)) return nullptr;
  void* ptr = device_.allocate(size);
  if (!ptr) return nullptr;
  ++stats_.num_device_allocs;
  ++stats_.num_segments;
  stats_.reserved_bytes += size;
  record_peaks();
  auto segment = std::make_unique<Segment>();
  segment->base = reinterpret_cast<uintptr_t>(ptr);
  segment->size = size;
  segment->stream = stream;
  segment->pool = &pool;
  auto* block = new Block(segment->base, size, segment.get(), nullptr, nullptr);
  segment->first = block;
  segments_.emplace(segment->base, std::move(segment));
  return block;
}

// Note [Expandable segments]: grows the stream's segment so that its free tail block (or a new
// tail block) holds `size` bytes, and returns that block outside the pool.
CachingAllocator::Block* CachingAllocator::expand_segment(StreamId stream, size_t size) {
  const size_t granularity = device_.expandable_granularity();
  Segment*& segment = expandable_segments_[stream];
  if (!segment) {
    // Reserve as much address space as the device has memory: the segment can then grow to
    // anything the device could ever back, and virtual addresses cost nothing.
    size_t virtual_size = round_up(device_.total_memory(), granularity);
    void* base = device_.reserve_virtual(virtual_size);
    if (!base) {
      expandable_segments_.erase(stream);
      return nullptr;
    }
    auto owned = std::make_unique<Segment>();
    owned->base = reinterpret_cast<uintptr_t>(base);
    owned->stream = stream;
    owned->pool = large_pool_.get();
    owned->expandable = true;
    owned->virtual_size = virtual_size;
    segment = owned.get();
    segments_.emplace(owned->base, std::move(owned));
    ++stats_.num_segments;
  }
  Block* tail = segment->first;
  while (tail && tail->next) tail = tail->next;
  const size_t tail_free = tail && tail->state == BlockState::kFree ? tail->size : 0;
  const size_t more = size > tail_free ? round_up(size - tail_free, granularity) : 0;
  if (more > 0) {
    if (more > segment->virtual_size - segment->size || !fits_under_limit(more)) return nullptr;
    if (!device_.map_more(as_pointer(segment->base), segment->size, more)) return nullptr;
    ++stats_.num_device_allocs;
    stats_.reserved_bytes += more;
    record_peaks();
  }
  const uintptr_t end = segment->base + segment->size;
  segment->size += more;
  if (tail_free > 0) {
    large_pool_->free_blocks.erase(tail);
    tail->size += more;
    return tail;
  }
  auto* block = new Block(end, more, segment, tail, nullptr);
  (tail ? tail->next : segment->first) = block;
  return block;
}

bool CachingAllocator::should_split(const Block& block, size_t size) const {
  const size_t remaining = block.size - size;
  if (block.segment->pool->is_small || block.segment->expandable) return remaining >= kMinBlockSize;
  // A large-pool remainder of at most 1 MiB would only ever serve small requests, which the
  // small pool serves; keeping it attached wastes less than fragmenting the segment.
  return size < config_.max_split_size && remaining > kSmallSize;
}

void* CachingAllocator::hand_out(Block* block, size_t size, size_t requested) {
  NABLA_ASSERT(block->state == BlockState::kFree && block->size >= size);
  if (should_split(*block, size)) {
    auto* rest = new Block(block->address + size, block->size - size, block->segment, block, block->next);
    if (rest->next) rest->next->prev = rest;
    block->next = rest;
    block->size = size;
    block->segment->pool->free_blocks.insert(rest);
  }
  block->state = BlockState::kAllocated;
  block->requested = requested;
  block->category = current_memory_category();
  categories_.add(block->category, block->size);
  allocated_blocks_.emplace(block->address, block);
  block->segment->last_used = ++use_clock_;
  stats_.allocated_bytes += block->size;
  stats_.requested_bytes += requested;
  stats_.active_bytes += block->size;
  ++stats_.num_allocs;
  record_peaks();
  return as_pointer(block->address);
}

// Returns an allocated or pending block to its pool, merged with free neighbours.
void CachingAllocator::free_block(Block* block) {
  NABLA_ASSERT(block->state != BlockState::kFree);
  stats_.active_bytes -= block->size;
  block->state = BlockState::kFree;
  block->requested = 0;
  block->stream_uses.clear();
  Segment& segment = *block->segment;
  auto& free_blocks = segment.pool->free_blocks;
  if (Block* prev = block->prev; prev && prev->state == BlockState::kFree) {
    free_blocks.erase(prev);
    block->address = prev->address;
    block->size += prev->size;
    block->prev = prev->prev;
    (block->prev ? block->prev->next : segment.first) = block;
    delete prev;
  }
  if (Block* next = block->next; next && next->state == BlockState::kFree) {
    free_blocks.erase(next);
    block->size += next->size;
    block->next = next->next;
    if (block->next) block->next->prev = block;
    delete next;
  }
  free_blocks.insert(block);
  segment.last_used = ++use_clock_;
}

void CachingAllocator::insert_events(Block* block) {
  for (StreamId stream : block->stream_uses) {
    EventId event = device_.create_event();
    device_.record_event(event, stream);
    stream_events_[stream].emplace_back(event, block);
    ++block->pending_events;
  }
  block->stream_uses.clear();
}

void CachingAllocator::process_events() {
  for (auto it = stream_events_.begin(); it != stream_events_.end();) {
    auto& events = it->second;
    // Events on one stream complete in the order they were recorded: stop at the first pending.
    while (!events.empty() && device_.query_event(events.front().first)) {
      auto [event, block] = events.front();
      events.pop_front();
      device_.destroy_event(event);
      if (--block->pending_events == 0) free_block(block);
    }
    it = events.empty() ? stream_events_.erase(it) : std::next(it);
  }
}

void CachingAllocator::synchronize_events() {
  NABLA_ASSERT(captures_.empty(), "waiting on events during graph capture");
  for (auto& [stream, events] : stream_events_) {
    for (auto [event, block] : events) {
      device_.synchronize_event(event);
      device_.destroy_event(event);
      if (--block->pending_events == 0) free_block(block);
    }
  }
  stream_events_.clear();
}

void CachingAllocator::release_cached_memory() {
  synchronize_events();
  std::vector<Segment*> shared;
  for (auto& [base, segment] : segments_) {
    if (segment->pool->owner == 0) shared.push_back(segment.get());
  }
  for (Segment* segment : shared) release_segment_memory(*segment);
}

void CachingAllocator::collect_garbage(size_t more_bytes) {
  const double threshold = config_.garbage_collection_threshold;
  if (threshold <= 0.0) return;
  const size_t limit = memory_limit_ != kNoLimit ? memory_limit_ : device_.total_memory();
  const auto target = static_cast<size_t>(threshold * static_cast<double>(limit));
  auto under_target = [&] { return stats_.reserved_bytes + more_bytes <= target; };
  if (under_target()) return;
  std::vector<Segment*> idle;
  for (auto& [base, segment] : segments_) {
    if (segment->pool->owner == 0 && releasable_bytes(*segment) > 0) idle.push_back(segment.get());
  }
  std::sort(idle.begin(), idle.end(), [](Segment* a, Segment* b) { return a->last_used < b->last_used; });
  for (Segment* segment : idle) {
    if (under_target()) break;
    release_segment_memory(*segment);
  }
}

size_t CachingAllocator::releasable_bytes(const Segment& segment) const {
  if (!segment.expandable) {
    const Block* only = segment.first;
    return !only->next && only->state == BlockState::kFree ? segment.size : 0;
  }
  const Block* tail = segment.first;
  while (tail && tail->next) tail = tail->next;
  if (!tail || tail->state != BlockState::kFree) return 0;
  // Only whole pages past the last live byte can be unmapped.
  const size_t keep = round_up(tail->address - segment.base, device_.expandable_granularity());
  return segment.size - keep;
}

// Gives back what of the segment is free: a fully free segment, or an expandable segment's free
// tail pages (and its address range once nothing is mapped).
void CachingAllocator::release_segment_memory(Segment& segment) {
  const size_t bytes = releasable_bytes(segment);
  if (!segment.expandable) {
    if (bytes == 0) return;
    segment.pool->free_blocks.erase(segment.first);
    delete segment.first;
    device_.free(as_pointer(segment.base), segment.size);
    ++stats_.num_device_frees;
    stats_.reserved_bytes -= segment.size;
    delete_segment(segment);
    return;
  }
  if (bytes > 0) {
    Block* tail = segment.first;
    while (tail->next) tail = tail->next;
    device_.unmap_tail(as_pointer(segment.base), segment.size, bytes);
    ++stats_.num_device_frees;
    stats_.reserved_bytes -= bytes;
    segment.size -= bytes;
    segment.pool->free_blocks.erase(tail);
    tail->size -= bytes;
    if (tail->size > 0) {
      segment.pool->free_blocks.insert(tail);
    } else {
      (tail->prev ? tail->prev->next : segment.first) = nullptr;
      delete tail;
    }
  }
  if (segment.size == 0) {
    device_.release_virtual(as_pointer(segment.base), segment.virtual_size);
    expandable_segments_.erase(segment.stream);
    delete_segment(segment);
  }
}

void CachingAllocator::delete_segment(Segment& segment) {
  --stats_.num_segments;
  const uintptr_t base = segment.base;  // a copy: erasing destroys `segment`
  segments_.erase(base);
}

void CachingAllocator::empty_cache() {
  std::lock_guard lock(mutex_);
  NABLA_CHECK(captures_.empty(),
              "empty_cache() cannot run while a CUDA graph capture is underway: freeing device memory "
              "synchronizes the device, which capture forbids");
  release_cached_memory();
}

void CachingAllocator::set_memory_fraction(double fraction) {
  NABLA_CHECK(fraction > 0.0 && fraction <= 1.0, "set_memory_fraction: expected a fraction in (0, 1], got {}",
              fraction);
  std::lock_guard lock(mutex_);
  fraction_ = fraction;
  memory_limit_ = static_cast<size_t>(fraction * static_cast<double>(device_.total_memory()));
  // Get under a lowered cap at once where the cache allows (it cannot during capture).
  if (stats_.reserved_bytes > memory_limit_ && captures_.empty()) release_cached_memory();
}

void CachingAllocator::begin_allocate_to_pool(PoolId pool, StreamId stream) {
  NABLA_CHECK(pool != 0, "begin_allocate_to_pool: pool id 0 is reserved; use a nonzero id");
  std::lock_guard lock(mutex_);
  for (const auto& [id, capturing_stream] : captures_) {
    NABLA_CHECK(capturing_stream != stream,
                "begin_allocate_to_pool: stream {:#x} already allocates to pool {}", stream, id);
  }
  if (!private_pools_.contains(pool)) private_pools_.emplace(pool, std::make_unique<PrivatePool>(pool));
  captures_.emplace_back(pool, stream);
}

void CachingAllocator::end_allocate_to_pool(PoolId pool) {
  std::lock_guard lock(mutex_);
  auto routed_to_pool = [&](const auto& capture) { return capture.first == pool; };
  NABLA_CHECK(std::any_of(captures_.begin(), captures_.end(), routed_to_pool),
              "end_allocate_to_pool: no stream allocates to pool {}", pool);
  std::erase_if(captures_, routed_to_pool);
  if (!captures_.empty()) return;
  for (Block* block : deferred_until_no_capture_) insert_events(block);
  deferred_until_no_capture_.clear();
}

void CachingAllocator::release_pool(PoolId pool) {
  std::lock_guard lock(mutex_);
  auto it = private_pools_.find(pool);
  NABLA_CHECK(it != private_pools_.end(), "release_pool: there is no private pool {}", pool);
  for (const auto& [id, stream] : captures_) {
    NABLA_CHECK(id != pool, "release_pool: pool {} is still in use by a capture on stream {:#x}", pool,
                stream);
  }
  // The pool's segments, free blocks included, become ordinary cache of the shared pools.
  PrivatePool& private_pool = *it->second;
  for (auto& [base, segment] : segments_) {
    BlockPool* from = segment->pool;
    if (from != &private_pool.small && from != &private_pool.large) continue;
    BlockPool* to = from->is_small ? small_pool_.get() : large_pool_.get();
    for (Block* block = segment->first; block; block = block->next) {
      if (block->state != BlockState::kFree) continue;
      from->free_blocks.erase(block);
      to->free_blocks.insert(block);
    }
    segment->pool = to;
  }
  private_pools_.erase(it);
}

void CachingAllocator::record_peaks() {
  stats_.peak_allocated_bytes = std::max(stats_.peak_allocated_bytes, stats_.allocated_bytes);
  stats_.peak_requested_bytes = std::max(stats_.peak_requested_bytes, stats_.requested_bytes);
  stats_.peak_active_bytes = std::max(stats_.peak_active_bytes, stats_.active_bytes);
  stats_.peak_reserved_bytes = std::max(stats_.peak_reserved_bytes, stats_.reserved_bytes);
}

}  // namespace nabla::cuda
