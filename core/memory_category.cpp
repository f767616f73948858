// Memory categories: the thread's current tag, the counters allocators keep, and the report.
// See memory_category.h for the design.
#include "nabla/core/memory_category.h"

#include <fmt/format.h>

#include "nabla/core/cpu_memory.h"
#include "nabla/core/cuda/detail/backend.h"
#include "nabla/core/cuda/memory.h"
#include "nabla/core/dispatch.h"
#include "nabla/core/error.h"

namespace nabla {

namespace {

thread_local MemoryCategory current_category = MemoryCategory::other;

// Raises `peak` to `value` unless another thread raised it further; true if this call raised it.
bool raise_peak(std::atomic<size_t>& peak, size_t value) {
  size_t seen = peak.load(std::memory_order_relaxed);
  while (value > seen) {
    if (peak.compare_exchange_weak(seen, value, std::memory_order_relaxed)) return true;
  }
  return false;
}

}  // namespace

std::string format_bytes(size_t bytes, int decimals) {
  constexpr const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB"};
  if (bytes < 1024) return fmt::format("{} B", bytes);
  double value = static_cast<double>(bytes) / 1024;
  int unit = 0;
  while (value >= 1024 && unit < 3) {
    value /= 1024;
    ++unit;
  }
  return fmt::format("{:.{}f} {}", value, decimals, kUnits[unit]);
}

std::string_view memory_category_name(MemoryCategory category) {
  switch (category) {
    case MemoryCategory::parameters:
      return "parameters";
    case MemoryCategory::gradients:
      return "gradients";
    case MemoryCategory::optimizer_state:
      return "optimizer_state";
    case MemoryCategory::activations:
      return "activations";
    case MemoryCategory::workspace:
      return "workspace";
    case MemoryCategory::other:
      return "other";
  }
  return "?";
}

MemoryCategory current_memory_category() {
  return current_category;
}

MemoryCategoryScope::MemoryCategoryScope(MemoryCategory category) : previous_(current_category) {
  NABLA_CHECK(
      static_cast<int>(category) < kNumMemoryCategories,
      "MemoryCategoryScope: {} is not a MemoryCategory (expected parameters, gradients, optimizer_state, "
      "activations, workspace or other)",
      static_cast<int>(category));
  current_category = category;
}

MemoryCategoryScope::~MemoryCategoryScope() {
  current_category = previous_;
}

namespace detail {

void CategoryCounters::add(MemoryCategory category, size_t bytes) {
  const size_t i = MemoryCategoryStats::index(category);
  const size_t now = current_[i].fetch_add(bytes, std::memory_order_relaxed) + bytes;
  raise_peak(peak_[i], now);
  const size_t total = total_.fetch_add(bytes, std::memory_order_relaxed) + bytes;
  if (raise_peak(peak_total_, total)) {
    // A new total peak: remember what it is made of. Under concurrent allocation the copy may mix
    // moments; the peak itself stays exact.
    std::lock_guard lock(at_peak_mutex_);
    for (int c = 0; c < kNumMemoryCategories; ++c) at_peak_[c] = current_[c].load(std::memory_order_relaxed);
  }
}

void CategoryCounters::sub(MemoryCategory category, size_t bytes) {
  current_[MemoryCategoryStats::index(category)].fetch_sub(bytes, std::memory_order_relaxed);
  total_.fetch_sub(bytes, std::memory_order_relaxed);
}

void CategoryCounters::reset_peaks() {
  std::lock_guard lock(at_peak_mutex_);
  for (int c = 0; c < kNumMemoryCategories; ++c) {
    at_peak_[c] = current_[c].load(std::memory_order_relaxed);
    peak_[c].store(at_peak_[c], std::memory_order_relaxed);
  }
  peak_total_.store(total_.load(std::memory_order_relaxed), std::memory_order_relaxed);
}

MemoryCategoryStats CategoryCounters::stats() const {
  MemoryCategoryStats stats;
  for (int c = 0; c < kNumMemoryCategories; ++c) {
    stats.current[c] = current_[c].load(std::memory_order_relaxed);
    stats.peak[c] = peak_[c].load(std::memory_order_relaxed);
  }
  stats.total = total_.load(std::memory_order_relaxed);
  stats.peak_total = peak_total_.load(std::memory_order_relaxed);
  std::lock_guard lock(at_peak_mutex_);
  stats.at_peak = at_peak_;
  return stats;
}

}  // namespace detail

MemoryCategoryStats memory_category_stats(Device device) {
  return dispatch_query(
      "memory_category_stats", device, [] { return detail::cpu_memory_category_stats(); },
      [&] { return cuda::backend::memory_category_stats(device.index); });
}

void reset_memory_category_peaks(Device device) {
  if (device.is_cpu()) {
    cpu_reset_peak_memory_stats();
  } else {
    cuda::reset_peak_memory_stats(device.index);
  }
}

std::string memory_category_report(Device device) {
  return memory_category_report(memory_category_stats(device), device);
}

std::string memory_category_report(const MemoryCategoryStats& stats, Device device) {
  std::string out = fmt::format("Memory by category on {}\n", device.str());
  if (!stats.tracked) {
    return out +
           "  not tracked: the native CUDA allocator does not tag allocations "
           "(use NABLA_CUDA_ALLOC_CONF=backend:caching)\n";
  }
  out += fmt::format("  {:<16} {:>12} {:>12} {:>14}\n", "category", "current", "peak", "at total peak");
  for (int c = 0; c < kNumMemoryCategories; ++c) {
    out += fmt::format("  {:<16} {:>12} {:>12} {:>14}\n",
                       memory_category_name(static_cast<MemoryCategory>(c)), format_bytes(stats.current[c]),
                       format_bytes(stats.peak[c]), format_bytes(stats.at_peak[c]));
  }
  out += fmt::format("  {:<16} {:>12} {:>12} {:>14}\n", "total", format_bytes(stats.total),
                     format_bytes(stats.peak_total), format_bytes(stats.peak_total));
  if (device.is_cuda()) {
    // Not a category of allocations: what the caching allocator keeps from the device for reuse.
    out += fmt::format("  {:<16} {:>12} {:>12} {:>14}\n", "cached", format_bytes(stats.cached), "-", "-");
    out += fmt::format("  (reserved from the device at most: {})\n", format_bytes(stats.peak_reserved));
  }
  return out;
}

}  // namespace nabla
