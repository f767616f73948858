#include "nabla/core/allocator.h"

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <new>

#include "nabla/core/cpu_memory.h"
#include "nabla/core/cuda/runtime.h"
#include "nabla/core/error.h"

namespace nabla {

namespace {

std::atomic<size_t> cpu_allocated{0};
std::atomic<size_t> cpu_peak{0};

class CpuAllocator final : public Allocator {
 public:
  DataPtr allocate(size_t nbytes) override {
    if (nbytes == 0) return DataPtr(nullptr, nullptr, nullptr, Device::cpu());
    size_t rounded = (nbytes + kCpuAlignment - 1) / kCpuAlignment * kCpuAlignment;
    void* p = std::aligned_alloc(kCpuAlignment, rounded);
    NABLA_CHECK(p != nullptr, "out of CPU memory: could not allocate {} bytes", nbytes);
    size_t now = cpu_allocated.fetch_add(nbytes) + nbytes;
    size_t peak = cpu_peak.load();
    while (now > peak && !cpu_peak.compare_exchange_weak(peak, now)) {
    }
    // The size rides in the context pointer, so the deleter can count the release.
    return DataPtr(
        p, reinterpret_cast<void*>(static_cast<uintptr_t>(nbytes)),
        [](void* context, void* data) {
          cpu_allocated.fetch_sub(static_cast<size_t>(reinterpret_cast<uintptr_t>(context)));
          std::free(data);
        },
        Device::cpu());
  }
};
}  // namespace

size_t cpu_memory_allocated() {
  return cpu_allocated.load();
}
size_t cpu_max_memory_allocated() {
  return cpu_peak.load();
}
void cpu_reset_peak_memory_stats() {
  cpu_peak.store(cpu_allocated.load());
}

Allocator& cpu_allocator() {
  static CpuAllocator allocator;
  return allocator;
}

Allocator& allocator_for(Device device) {
  if (device.is_cpu()) return cpu_allocator();
  return cuda::device_allocator(device.index);
}

}  // namespace nabla
