#include "nabla/core/allocator.h"

#include <cstdlib>
#include <new>

#include "nabla/core/cuda/runtime.h"
#include "nabla/core/error.h"

namespace nabla {

namespace {
class CpuAllocator final : public Allocator {
 public:
  DataPtr allocate(size_t nbytes) override {
    if (nbytes == 0) return DataPtr(nullptr, nullptr, nullptr, Device::cpu());
    size_t rounded = (nbytes + kCpuAlignment - 1) / kCpuAlignment * kCpuAlignment;
    void* p = std::aligned_alloc(kCpuAlignment, rounded);
    NABLA_CHECK(p != nullptr, "out of CPU memory: could not allocate {} bytes", nbytes);
    return DataPtr(
        p, nullptr, [](void*, void* data) { std::free(data); }, Device::cpu());
  }
};
}  // namespace

Allocator& cpu_allocator() {
  static CpuAllocator allocator;
  return allocator;
}

Allocator& allocator_for(Device device) {
  if (device.is_cpu()) return cpu_allocator();
  return cuda::device_allocator(device.index);
}

}  // namespace nabla
