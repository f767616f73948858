// Public header. Memory categories: what each allocated byte is for (parameters, gradients,
// optimizer state, activations, workspace, other), so that a run can report its peak broken down
// by category instead of one opaque number.
//
// Allocations are tagged, not classified after the fact: code that knows what it allocates opens
// a MemoryCategoryScope, and every allocation made by that thread while the scope lives is counted
// under its category (the innermost scope wins; outside any scope the category is `other`). The
// CPU allocator and the CUDA caching allocator store the category with the allocation and give it
// back on free, so current bytes per category are exact, not sampled. Tagging costs one
// thread_local read per allocation plus the counter update the allocator does anyway.
//
//   {
//     nabla::MemoryCategoryScope tag(nabla::MemoryCategory::optimizer_state);
//     momentum = nabla::zeros_like(param);        // counted as optimizer state
//   }
//   std::cout << nabla::memory_category_report(device);
//
// Kept out of tensor.h on purpose: only the files that tag or report include it.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>

#include "nabla/core/device.h"

namespace nabla {

enum class MemoryCategory : uint8_t { parameters, gradients, optimizer_state, activations, workspace, other };
inline constexpr int kNumMemoryCategories = 6;

// "parameters", "gradients", "optimizer_state", "activations", "workspace", "other".
std::string_view memory_category_name(MemoryCategory category);

// The category this thread's allocations are counted under now.
MemoryCategory current_memory_category();

// Counts this thread's allocations under `category` while it lives, then restores the previous
// category (scopes nest). Neither copyable nor movable: it must die on the thread that made it.
class MemoryCategoryScope {
 public:
  explicit MemoryCategoryScope(MemoryCategory category);
  ~MemoryCategoryScope();
  MemoryCategoryScope(const MemoryCategoryScope&) = delete;
  MemoryCategoryScope& operator=(const MemoryCategoryScope&) = delete;

 private:
  MemoryCategory previous_;
};

// Bytes per category of one device. Indexed by category: stats.current[stats.index(c)], or
// stats.current_of(c).
struct MemoryCategoryStats {
  std::array<size_t, kNumMemoryCategories> current{};  // held now
  std::array<size_t, kNumMemoryCategories> peak{};     // each category's own maximum
  // The breakdown at the moment the total peaked (the categories' peaks need not coincide, so
  // their sum can exceed the total peak; this one sums to it).
  std::array<size_t, kNumMemoryCategories> at_peak{};
  size_t total = 0;       // sum of current
  size_t peak_total = 0;  // maximum of total
  // CUDA only: memory the caching allocator holds from the device but has not handed out
  // (reserved - allocated), the "cached" category of the report. 0 on the CPU.
  size_t cached = 0;
  size_t peak_reserved = 0;  // CUDA only
  // False where allocations are not tagged (the native CUDA backend); every count is then 0.
  bool tracked = true;

  static constexpr size_t index(MemoryCategory c) { return static_cast<size_t>(c); }
  size_t current_of(MemoryCategory c) const { return current[index(c)]; }
  size_t peak_of(MemoryCategory c) const { return peak[index(c)]; }
};

// The counts of `device`: the CPU allocator's, or cuda:N's caching allocator's. CPU byte counts are
// the sizes requested; CUDA ones are the sizes of the blocks handed out (at least the request
// rounded up to 512 B), so that on CUDA the categories sum to cuda::memory_allocated().
MemoryCategoryStats memory_category_stats(Device device);
// Restarts every peak of `device` from what is held now (per category and total; this is the same
// reset as cpu_reset_peak_memory_stats / cuda::reset_peak_memory_stats).
void reset_memory_category_peaks(Device device);
// Bytes in human units, as the memory reports and error messages print them: "512 B",
// "4.00 KiB", "2.00 GiB" (with `decimals` digits after the point).
std::string format_bytes(size_t bytes, int decimals = 2);

// A small table: per category the current and peak bytes and the share at the total's peak,
// plus the cached row on CUDA.
std::string memory_category_report(Device device);
std::string memory_category_report(const MemoryCategoryStats& stats, Device device);

namespace detail {

// Per-category byte counters of one allocator: exact current bytes, peaks, and the breakdown at
// the total's peak. Thread-safe: plain atomics on the hot path; the small mutex is taken only when
// the total reaches a new peak, to copy the breakdown.
class CategoryCounters {
 public:
  void add(MemoryCategory category, size_t bytes);
  void sub(MemoryCategory category, size_t bytes);
  void reset_peaks();
  MemoryCategoryStats stats() const;

 private:
  std::array<std::atomic<size_t>, kNumMemoryCategories> current_{};
  std::array<std::atomic<size_t>, kNumMemoryCategories> peak_{};
  std::atomic<size_t> total_{0};
  std::atomic<size_t> peak_total_{0};
  mutable std::mutex at_peak_mutex_;
  std::array<size_t, kNumMemoryCategories> at_peak_{};
};

// The CPU allocator's counters (core/allocator.cpp).
MemoryCategoryStats cpu_memory_category_stats();
}  // namespace detail

}  // namespace nabla
