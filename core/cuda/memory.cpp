// The CUDA side of device memory (detail/backend.h): the device allocators behind
// allocator_for(Device::cuda(i)) and the public memory API.
//
// Each device gets, on first use, either the caching allocator over the real device
// (CachingAllocator + CudaDeviceMemory) or the native one (cudaMalloc/cudaFree per tensor), as
// NABLA_CUDA_ALLOC_CONF says. Blocks are allocated for the thread's current stream, so reuse
// follows the allocator's per-stream rules; record_stream() covers other streams.
#include <array>
#include <memory>
#include <mutex>

#include "nabla/core/cuda/caching_allocator.h"
#include "nabla/core/cuda/check.h"
#include "nabla/core/cuda/cuda_device_memory.h"
#include "nabla/core/cuda/detail/backend.h"
#include "nabla/core/cuda/device_guard.h"
#include "nabla/core/error.h"
#include "nabla/core/memory_category.h"

namespace nabla::cuda::backend {

namespace {

constexpr int kMaxDevices = 128;

class CachingDeviceAllocator final : public Allocator {
 public:
  CachingDeviceAllocator(int device, const AllocConfig& config)
      : device_(device), memory_(device), caching_(memory_, config, device) {}

  DataPtr allocate(size_t nbytes) override {
    if (nbytes == 0) return DataPtr(nullptr, nullptr, nullptr, Device::cuda(device_));
    void* p = caching_.allocate(nbytes, current_stream(device_).id());
    return DataPtr(
        p, this,
        [](void* self, void* data) { static_cast<CachingDeviceAllocator*>(self)->caching_.free(data); },
        Device::cuda(device_));
  }
  CachingAllocator& policy() { return caching_; }

 private:
  int device_;
  CudaDeviceMemory memory_;
  CachingAllocator caching_;
};

// One cudaMalloc per tensor and a cudaFree (which waits for the device) when it dies. For
// debugging with compute-sanitizer, which cannot see inside a cache.
class NativeDeviceAllocator final : public Allocator {
 public:
  explicit NativeDeviceAllocator(int device) : device_(device) {}
  DataPtr allocate(size_t nbytes) override {
    if (nbytes == 0) return DataPtr(nullptr, nullptr, nullptr, Device::cuda(device_));
    void* p = nullptr;
    {
      DeviceGuard guard(device_);
      NABLA_CUDA_CHECK(cudaMalloc(&p, nbytes));
    }
    ++counts_.allocations;
    ++counts_.device_allocations;
    return DataPtr(
        p, this,
        [](void* self, void* data) {
          ++static_cast<NativeDeviceAllocator*>(self)->counts_.frees;
          cudaFree(data);
        },
        Device::cuda(device_));
  }
  AllocatorCounts counts_;

 private:
  int device_;
};

struct DeviceState {
  std::once_flag once;
  std::unique_ptr<CachingDeviceAllocator> caching;
  std::unique_ptr<NativeDeviceAllocator> native;
};

const AllocConfig& config() {
  static const AllocConfig c = alloc_config_from_env();  // throws on a bad variable
  return c;
}

DeviceState& state(int device) {
  static auto* states = new std::array<DeviceState, kMaxDevices>();  // leaked: tensors may outlive statics
  device = checked_device(device);
  DeviceState& s = (*states)[device];
  std::call_once(s.once, [&] {
    if (config().backend == AllocBackend::kNative) {
      s.native = std::make_unique<NativeDeviceAllocator>(device);
    } else {
      s.caching = std::make_unique<CachingDeviceAllocator>(device, config());
    }
  });
  return s;
}

CachingAllocator* policy(int device) {
  DeviceState& s = state(device);
  return s.caching ? &s.caching->policy() : nullptr;
}

}  // namespace

Allocator& device_allocator(int index) {
  DeviceState& s = state(index);
  if (s.caching) return *s.caching;
  return *s.native;
}

size_t memory_allocated(int device) {
  auto* p = policy(device);
  return p ? p->memory_allocated() : 0;
}
size_t max_memory_allocated(int device) {
  auto* p = policy(device);
  return p ? p->max_memory_allocated() : 0;
}
size_t memory_reserved(int device) {
  auto* p = policy(device);
  return p ? p->memory_reserved() : 0;
}
size_t max_memory_reserved(int device) {
  auto* p = policy(device);
  return p ? p->max_memory_reserved() : 0;
}
void reset_peak_memory_stats(int device) {
  if (auto* p = policy(device)) p->reset_peak_memory_stats();
}

AllocatorCounts allocator_counts(int device) {
  DeviceState& s = state(device);
  if (s.native) return s.native->counts_;
  MemoryStats m = s.caching->policy().stats();
  return {m.num_allocs, m.num_frees, m.num_device_allocs, m.num_alloc_retries, m.num_ooms};
}

void empty_cache() {
  for (int d = 0; d < device_count(); ++d) {
    if (auto* p = policy(d)) p->empty_cache();
  }
}

void set_memory_fraction(double fraction, int device) {
  NABLA_CHECK(fraction > 0 && fraction <= 1, "set_memory_fraction: fraction must be in (0, 1], got {}",
              fraction);
  auto* p = policy(device);
  NABLA_CHECK(p != nullptr,
              "set_memory_fraction needs the caching allocator (NABLA_CUDA_ALLOC_CONF backend:caching)");
  p->set_memory_fraction(fraction);
}

std::string allocator_backend() {
  return config().backend == AllocBackend::kNative ? "native" : "caching";
}

std::string memory_summary(int device) {
  auto* p = policy(device);
  return p ? p->memory_summary() : "native allocator: no cache, no summary\n";
}

std::string memory_snapshot(int device) {
  auto* p = policy(device);
  return p ? p->memory_snapshot() : "{\"backend\": \"native\", \"segments\": []}";
}

void record_stream(const Tensor& t, Stream stream) {
  if (auto* p = policy(t.device().index)) p->record_stream(t.storage()->data(), stream.id());
}

MemoryCategoryStats memory_category_stats(int device) {
  if (auto* p = policy(device)) return p->category_stats();
  MemoryCategoryStats untracked;  // the native backend does not tag its allocations
  untracked.tracked = false;
  return untracked;
}

void begin_graph_pool(int device, uint64_t pool, Stream stream) {
  auto* p = policy(device);
  NABLA_CHECK(p != nullptr,
              "CUDA graph capture needs the caching allocator (NABLA_CUDA_ALLOC_CONF backend:caching)");
  p->begin_allocate_to_pool(pool, stream.id());
}
void end_graph_pool(int device, uint64_t pool) {
  if (auto* p = policy(device)) p->end_allocate_to_pool(pool);
}
void release_graph_pool(int device, uint64_t pool, Stream stream) {
  // Replays already queued may still use the pool's memory: wait for the stream first. This is
  // teardown, never the compute path.
  stream.synchronize();
  if (auto* p = policy(device)) p->release_pool(pool);
}

}  // namespace nabla::cuda::backend
