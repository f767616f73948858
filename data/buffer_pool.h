// Public header. BufferPool: recycled host buffers for the loader's batches.
//
// A batch tensor handed to the user owns its buffer through a Storage whose deleter gives the
// buffer back to the pool, so steady-state training allocates nothing: the pool grows to the
// number of batches alive at once (prefetch depth + what the user holds) and then only recycles.
//
// Pinned buffers come from nabla::cuda::pinned_allocator(), which is itself a recycling cache
// that knows about in-flight copies (a block an asynchronous upload still reads is not handed
// out again until the copy's event has completed). So a pinned pool defers to it instead of
// keeping its own free list, which would bypass that safety. Plain host buffers (no CUDA, or
// pin_memory=false) are 64-byte aligned and recycled here.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "nabla/core/storage.h"

namespace nabla::data {

struct BufferPoolStats {
  int64_t fresh_allocations = 0;  // buffers taken from the underlying allocator
  int64_t reuses = 0;             // buffers handed out again from this pool's free list
  int64_t live = 0;               // buffers handed out and not yet returned
  int64_t max_live = 0;
};

class BufferPool {
 public:
  // `pinned`: page-locked memory (needs CUDA; throws when there is no device).
  explicit BufferPool(bool pinned);
  ~BufferPool();
  BufferPool(const BufferPool&) = delete;
  BufferPool& operator=(const BufferPool&) = delete;

  bool pinned() const;
  // A buffer of at least `nbytes` bytes, returned to the pool when the last Storage user drops
  // it (which may happen after the pool itself is gone; the shared state outlives both).
  std::shared_ptr<Storage> acquire(size_t nbytes);
  BufferPoolStats stats() const;

  struct State;  // shared with the deleters of buffers on loan (buffer_pool.cpp)

 private:
  std::shared_ptr<State> state_;
};

}  // namespace nabla::data
