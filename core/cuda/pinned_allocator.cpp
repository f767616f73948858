// The CUDA side of the pinned host allocator (pinned_allocator.h, detail/backend.h). Blocks live in an
// address-ordered map so that any pointer into a block finds it; free blocks sit in per-size lists; blocks
// freed while a recorded copy may still read them wait in `pending` until their events complete.
#include <bit>
#include <cstring>
#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "nabla/core/cuda/check.h"
#include "nabla/core/cuda/detail/backend.h"
#include "nabla/core/cuda/runtime.h"
#include "nabla/core/error.h"

namespace nabla::cuda::backend {

namespace {

struct Block {
  size_t size = 0;
  bool in_use = false;
  std::vector<cudaEvent_t> uses;  // events of streams that may still read the block
};

class PinnedAllocator final : public Allocator {
 public:
  DataPtr allocate(size_t nbytes) override {
    if (nbytes == 0) return DataPtr(nullptr, nullptr, nullptr, Device::cpu());
    size_t size = std::bit_ceil(std::max<size_t>(nbytes, 512));
    std::lock_guard lock(mutex_);
    reclaim_pending();
    void* p = nullptr;
    auto& list = free_[size];
    if (!list.empty()) {
      p = list.back();
      list.pop_back();
    } else {
      cudaError_t status = cudaHostAlloc(&p, size, cudaHostAllocDefault);
      if (status != cudaSuccess) {
        cudaGetLastError();
        release_free_blocks();  // give cached blocks back and try once more
        NABLA_CUDA_CHECK(cudaHostAlloc(&p, size, cudaHostAllocDefault));
      }
      blocks_[p] = Block{size, false, {}};
      stats_.cached_bytes += size;
      ++stats_.host_alloc_calls;
    }
    blocks_[p].in_use = true;
    stats_.allocated_bytes += size;
    return DataPtr(
        p, this, [](void* self, void* data) { static_cast<PinnedAllocator*>(self)->release(data); },
        Device::cpu());
  }

  bool contains(const void* ptr) {
    std::lock_guard lock(mutex_);
    return find(ptr) != nullptr;
  }

  void record_use(const void* ptr, Stream stream) {
    std::lock_guard lock(mutex_);
    Block* b = find(ptr);
    if (!b) return;  // not pinned memory: the copy was synchronous anyway
    cudaEvent_t e = nullptr;
    NABLA_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    NABLA_CUDA_CHECK(cudaEventRecord(e, static_cast<cudaStream_t>(stream.handle())));
    b->uses.push_back(e);
  }

  PinnedStats stats() {
    std::lock_guard lock(mutex_);
    return stats_;
  }

  void empty_cache() {
    std::lock_guard lock(mutex_);
    reclaim_pending();
    release_free_blocks();
  }

 private:
  void release(void* p) {
    std::lock_guard lock(mutex_);
    Block& b = blocks_.at(p);
    b.in_use = false;
    stats_.allocated_bytes -= b.size;
    if (b.uses.empty()) {
      free_[b.size].push_back(p);
    } else {
      pending_.push_back(p);
    }
  }

  // Moves pending blocks whose recorded uses have all completed to the free lists.
  void reclaim_pending() {
    for (size_t i = 0; i < pending_.size();) {
      Block& b = blocks_.at(pending_[i]);
      while (!b.uses.empty()) {
        cudaError_t status = cudaEventQuery(b.uses.back());
        if (status == cudaErrorNotReady) {
          cudaGetLastError();
          break;
        }
        NABLA_CUDA_CHECK(status);
        NABLA_CUDA_CHECK(cudaEventDestroy(b.uses.back()));
        b.uses.pop_back();
      }
      if (b.uses.empty()) {
        free_[b.size].push_back(pending_[i]);
        pending_[i] = pending_.back();
        pending_.pop_back();
      } else {
        ++i;
      }
    }
  }

  void release_free_blocks() {
    for (auto& [size, list] : free_) {
      for (void* p : list) {
        cudaFreeHost(p);
        blocks_.erase(p);
        stats_.cached_bytes -= size;
      }
      list.clear();
    }
  }

  Block* find(const void* ptr) {
    auto it = blocks_.upper_bound(const_cast<void*>(ptr));
    if (it == blocks_.begin()) return nullptr;
    --it;
    auto* base = static_cast<const char*>(it->first);
    return static_cast<const char*>(ptr) < base + it->second.size ? &it->second : nullptr;
  }

  std::mutex mutex_;
  std::map<void*, Block> blocks_;
  std::unordered_map<size_t, std::vector<void*>> free_;
  std::vector<void*> pending_;
  PinnedStats stats_;
};

PinnedAllocator& instance() {
  static auto* allocator = new PinnedAllocator();  // leaked on purpose: tensors may outlive statics
  return *allocator;
}

}  // namespace

Allocator& pinned_allocator() {
  NABLA_CHECK(is_available(), "pinned memory needs a CUDA device, and none is available");
  return instance();
}
void* alloc_mapped_host(size_t nbytes) {
  void* p = nullptr;
  NABLA_CUDA_CHECK(cudaHostAlloc(&p, nbytes, cudaHostAllocMapped | cudaHostAllocPortable));
  std::memset(p, 0, nbytes);
  return p;
}

bool is_pinned(const void* ptr) {
  return is_available() && instance().contains(ptr);
}
void record_pinned_use(const void* ptr, Stream stream) {
  instance().record_use(ptr, stream);
}
PinnedStats pinned_stats() {
  return instance().stats();
}
void pinned_empty_cache() {
  instance().empty_cache();
}

}  // namespace nabla::cuda::backend
