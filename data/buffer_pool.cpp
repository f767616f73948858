// BufferPool (see buffer_pool.h). The free list is keyed by exact size: a loader asks for one
// batch size over and over, so the only miss is the short last batch of an epoch, which is
// allocated at full size anyway (the loader narrows the tensor, not the buffer).
#include "nabla/data/buffer_pool.h"

#include <map>
#include <mutex>
#include <vector>

#include "nabla/core/cuda/pinned_allocator.h"
#include "nabla/core/cuda/runtime.h"
#include "nabla/core/error.h"

namespace nabla::data {

struct BufferPool::State {
  bool pinned = false;
  mutable std::mutex mutex;
  std::multimap<size_t, DataPtr> free;  // plain host memory only
  BufferPoolStats stats;
};

namespace {

// The DataPtr handed to Storage: its deleter brings the real allocation back to the pool.
struct Loan {
  std::shared_ptr<BufferPool::State> state;
  DataPtr data;
  size_t nbytes;
};

}  // namespace

BufferPool::BufferPool(bool pinned) : state_(std::make_shared<State>()) {
  if (pinned) {
    NABLA_CHECK(nabla::cuda::is_available(),
                "pin_memory=true needs a CUDA device (nabla built with CUDA and a GPU present); "
                "use pin_memory=false on this machine");
  }
  state_->pinned = pinned;
}

BufferPool::~BufferPool() = default;

bool BufferPool::pinned() const {
  return state_->pinned;
}

std::shared_ptr<Storage> BufferPool::acquire(size_t nbytes) {
  DataPtr data;
  {
    std::lock_guard lock(state_->mutex);
    if (auto it = state_->free.find(nbytes); it != state_->free.end()) {
      data = std::move(it->second);
      state_->free.erase(it);
      ++state_->stats.reuses;
    }
  }
  if (!data.get()) {
    // Outside the lock: cudaHostAlloc of a large batch can take milliseconds.
    data =
        state_->pinned ? nabla::cuda::pinned_allocator().allocate(nbytes) : cpu_allocator().allocate(nbytes);
    std::lock_guard lock(state_->mutex);
    ++state_->stats.fresh_allocations;
  }
  {
    std::lock_guard lock(state_->mutex);
    ++state_->stats.live;
    state_->stats.max_live = std::max(state_->stats.max_live, state_->stats.live);
  }
  void* raw = data.get();
  Device device = data.device();
  auto* loan = new Loan{state_, std::move(data), nbytes};
  DataPtr handle(
      raw, loan,
      [](void* context, void*) {
        std::unique_ptr<Loan> loan(static_cast<Loan*>(context));
        auto& state = *loan->state;
        std::lock_guard lock(state.mutex);
        --state.stats.live;
        // Pinned blocks go back to the pinned allocator (it tracks in-flight copies).
        if (!state.pinned) state.free.emplace(loan->nbytes, std::move(loan->data));
      },
      device);
  return std::make_shared<Storage>(std::move(handle), nbytes);
}

BufferPoolStats BufferPool::stats() const {
  std::lock_guard lock(state_->mutex);
  return state_->stats;
}

}  // namespace nabla::data
