// The CPU allocator (64-byte aligned, counted, optionally capped, tagged by memory category) and
// allocator_for().
#include "nabla/core/allocator.h"

#include <malloc.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <new>

#include "nabla/core/cpu_memory.h"
#include "nabla/core/cuda/runtime.h"
#include "nabla/core/error.h"
#include "nabla/core/memory_category.h"

namespace nabla {

namespace {

std::atomic<size_t> cpu_allocated{0};
std::atomic<size_t> cpu_peak{0};
std::atomic<size_t> cpu_limit{0};  // 0: unlimited

detail::CategoryCounters& cpu_categories() {
  static auto* counters = new detail::CategoryCounters();  // leaked: tensors may outlive statics
  return *counters;
}

// The DataPtr context carries the size and the category of the allocation, so that the deleter
// can count the release without a side table: (nbytes << kCategoryBits) | category.
constexpr int kCategoryBits = 3;
static_assert(kNumMemoryCategories <= (1 << kCategoryBits));
constexpr size_t kMaxCpuRequest = size_t{1} << (64 - kCategoryBits - 1);

void release(void* context, void* data) {
  const auto packed = static_cast<size_t>(reinterpret_cast<uintptr_t>(context));
  const size_t nbytes = packed >> kCategoryBits;
  cpu_allocated.fetch_sub(nbytes);
  cpu_categories().sub(static_cast<MemoryCategory>(packed & ((1u << kCategoryBits) - 1)), nbytes);
  std::free(data);
}

[[noreturn]] void throw_cpu_oom(size_t nbytes, size_t allocated, size_t limit, const char* why) {
  throw OutOfMemoryError(fmt::format(
      "CPU out of memory: tried to allocate {} bytes with {} bytes allocated by nabla's CPU allocator{}; {}",
      nbytes, allocated, limit ? fmt::format(" and a limit of {} bytes", limit) : std::string(), why));
}

// glibc returns freed blocks above its trim threshold to the kernel and serves blocks above its
// mmap threshold with fresh mmaps, so a training step that frees and re-allocates its
// activations (megabytes each) page-faults every page of them again: that cost 45% of a CPU
// step of the small CNN. Keep freed memory in the heap instead: blocks up to 32 MiB (glibc's
// maximum threshold) come from the heap, and the heap top is trimmed only above 1 GiB free.
void keep_freed_memory_in_heap() {
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
}

class CpuAllocator final : public Allocator {
 public:
  CpuAllocator() { keep_freed_memory_in_heap(); }
  DataPtr allocate(size_t nbytes) override {
    if (nbytes == 0) return DataPtr(nullptr, nullptr, nullptr, Device::cpu());
    if (nbytes > kMaxCpuRequest)
      throw_cpu_oom(nbytes, cpu_allocated.load(), cpu_limit.load(), "no machine has that");
    // Reserve the bytes first, so that two threads cannot both pass the limit check.
    const size_t now = cpu_allocated.fetch_add(nbytes) + nbytes;
    const size_t limit = cpu_limit.load(std::memory_order_relaxed);
    if (limit != 0 && now > limit) {
      cpu_allocated.fetch_sub(nbytes);
      throw_cpu_oom(nbytes, now - nbytes, limit,
                    "the limit was set by set_cpu_memory_limit (call set_cpu_memory_limit(0) to lift it)");
    }
    size_t rounded = (nbytes + kCpuAlignment - 1) / kCpuAlignment * kCpuAlignment;
    void* p = std::aligned_alloc(kCpuAlignment, rounded);
    if (p == nullptr) {
      cpu_allocated.fetch_sub(nbytes);
      throw_cpu_oom(nbytes, now - nbytes, limit, "the operating system refused the memory");
    }
    size_t peak = cpu_peak.load();
    while (now > peak && !cpu_peak.compare_exchange_weak(peak, now)) {
    }
    const MemoryCategory category = current_memory_category();
    cpu_categories().add(category, nbytes);
    const size_t packed = (nbytes << kCategoryBits) | static_cast<size_t>(category);
    return DataPtr(p, reinterpret_cast<void*>(static_cast<uintptr_t>(packed)), release, Device::cpu());
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
  cpu_categories().reset_peaks();
}
void set_cpu_memory_limit(size_t bytes) {
  cpu_limit.store(bytes);
}
size_t cpu_memory_limit() {
  return cpu_limit.load();
}

namespace detail {
MemoryCategoryStats cpu_memory_category_stats() {
  return cpu_categories().stats();
}
}  // namespace detail

Allocator& cpu_allocator() {
  static CpuAllocator allocator;
  return allocator;
}

Allocator& allocator_for(Device device) {
  if (device.is_cpu()) return cpu_allocator();
  return cuda::device_allocator(device.index);
}

}  // namespace nabla
