// The caching allocator's reporting: stats, the summary table, the JSON snapshot, the
// out-of-memory message, and the invariant check the tests run after every step.
#include <nlohmann/json.hpp>

#include <array>

#include "nabla/core/cuda/caching_allocator.h"
#include "nabla/core/cuda/caching_allocator_internal.h"
#include "nabla/core/error.h"

namespace nabla::cuda {

namespace {

const char* state_name(BlockState state) {
  switch (state) {
    case BlockState::kFree:
      return "free";
    case BlockState::kAllocated:
      return "allocated";
    case BlockState::kPendingEvents:
      return "pending_event";
  }
  return "?";
}

}  // namespace

size_t CachingAllocator::memory_allocated() const {
  std::lock_guard lock(mutex_);
  return stats_.allocated_bytes;
}

size_t CachingAllocator::memory_reserved() const {
  std::lock_guard lock(mutex_);
  return stats_.reserved_bytes;
}

size_t CachingAllocator::max_memory_allocated() const {
  std::lock_guard lock(mutex_);
  return stats_.peak_allocated_bytes;
}

size_t CachingAllocator::max_memory_reserved() const {
  std::lock_guard lock(mutex_);
  return stats_.peak_reserved_bytes;
}

void CachingAllocator::reset_peak_memory_stats() {
  std::lock_guard lock(mutex_);
  stats_.peak_allocated_bytes = stats_.allocated_bytes;
  stats_.peak_requested_bytes = stats_.requested_bytes;
  stats_.peak_active_bytes = stats_.active_bytes;
  stats_.peak_reserved_bytes = stats_.reserved_bytes;
  categories_.reset_peaks();
}

MemoryCategoryStats CachingAllocator::category_stats() const {
  std::lock_guard lock(mutex_);
  MemoryCategoryStats stats = categories_.stats();
  stats.cached = stats_.reserved_bytes - stats_.allocated_bytes;
  stats.peak_reserved = stats_.peak_reserved_bytes;
  return stats;
}

MemoryStats CachingAllocator::stats() const {
  std::lock_guard lock(mutex_);
  MemoryStats stats = stats_;
  stats.num_allocated_blocks = allocated_blocks_.size();
  stats.num_cached_blocks = small_pool_->free_blocks.size() + large_pool_->free_blocks.size();
  for (const auto& [id, pool] : private_pools_) {
    stats.num_cached_blocks += pool->small.free_blocks.size() + pool->large.free_blocks.size();
  }
  return stats;
}

std::string CachingAllocator::memory_summary() const {
  const MemoryStats s = stats();
  std::string limit = "none";
  {
    std::lock_guard lock(mutex_);
    if (memory_limit_ != std::numeric_limits<size_t>::max()) {
      limit = fmt::format("{} (memory fraction {:.2f})", format_bytes(memory_limit_), fraction_);
    }
  }
  constexpr int kWidth = 72;
  const std::string rule = fmt::format("|{:-^{}}|\n", "", kWidth - 2);
  std::string out = fmt::format("|{:=^{}}|\n", "", kWidth - 2);
  out +=
      fmt::format("|{:^{}}|\n", fmt::format("nabla CUDA memory summary, cuda:{}", device_index_), kWidth - 2);
  out += rule;
  auto row = [&](std::string_view name, std::string current, std::string peak) {
    out += fmt::format("| {:<33}| {:>15} | {:>15} |\n", name, current, peak);
  };
  row("Metric", "Current", "Peak");
  out += rule;
  row("Allocated memory", format_bytes(s.allocated_bytes), format_bytes(s.peak_allocated_bytes));
  row("Requested memory", format_bytes(s.requested_bytes), format_bytes(s.peak_requested_bytes));
  row("Active memory", format_bytes(s.active_bytes), format_bytes(s.peak_active_bytes));
  row("Reserved memory", format_bytes(s.reserved_bytes), format_bytes(s.peak_reserved_bytes));
  row("Cached, unallocated memory", format_bytes(s.reserved_bytes - s.allocated_bytes), "-");
  row("Segments", std::to_string(s.num_segments), "-");
  row("Allocated blocks", std::to_string(s.num_allocated_blocks), "-");
  row("Cached free blocks", std::to_string(s.num_cached_blocks), "-");
  out += rule;
  auto count = [&](std::string_view name, uint64_t n) { row(name, std::to_string(n), ""); };
  count("Allocations", s.num_allocs);
  count("Frees", s.num_frees);
  count("Device allocations", s.num_device_allocs);
  count("Device frees", s.num_device_frees);
  count("Retries after freeing the cache", s.num_alloc_retries);
  count("Out-of-memory errors", s.num_ooms);
  out += rule;
  out += fmt::format("| {:<{}}|\n", "Memory limit: " + limit, kWidth - 3);
  const std::string config_text = to_string(config_);
  std::string_view config = config_text;  // one key:value a line, to fit the table
  for (std::string_view prefix = "Config: "; !config.empty(); prefix = "        ") {
    size_t comma = std::min(config.find(','), config.size());
    out += fmt::format("| {}{:<{}}|\n", prefix, config.substr(0, comma), kWidth - 3 - prefix.size());
    config.remove_prefix(std::min(comma + 1, config.size()));
  }
  out += fmt::format("|{:=^{}}|\n", "", kWidth - 2);
  return out;
}

std::string CachingAllocator::memory_snapshot() const {
  const MemoryStats s = stats();
  std::lock_guard lock(mutex_);
  nlohmann::json snapshot = {
      {"device", device_index_},
      {"allocated_bytes", s.allocated_bytes},
      {"requested_bytes", s.requested_bytes},
      {"active_bytes", s.active_bytes},
      {"reserved_bytes", s.reserved_bytes},
      {"peak_allocated_bytes", s.peak_allocated_bytes},
      {"peak_reserved_bytes", s.peak_reserved_bytes},
      {"memory_limit_bytes", nullptr},
      {"num_allocs", s.num_allocs},
      {"num_frees", s.num_frees},
      {"num_device_allocs", s.num_device_allocs},
      {"num_device_frees", s.num_device_frees},
      {"num_alloc_retries", s.num_alloc_retries},
      {"num_ooms", s.num_ooms},
      {"config", to_string(config_)},
  };
  const MemoryCategoryStats categories = categories_.stats();
  for (int c = 0; c < kNumMemoryCategories; ++c) {
    snapshot["category_bytes"][memory_category_name(static_cast<MemoryCategory>(c))] = categories.current[c];
  }
  if (memory_limit_ != std::numeric_limits<size_t>::max()) snapshot["memory_limit_bytes"] = memory_limit_;
  nlohmann::json segments = nlohmann::json::array();
  for (const auto& [base, segment] : segments_) {
    size_t allocated = 0, active = 0;
    nlohmann::json blocks = nlohmann::json::array();
    for (const Block* b = segment->first; b; b = b->next) {
      if (b->state == BlockState::kAllocated) allocated += b->size;
      if (b->state != BlockState::kFree) active += b->size;
      nlohmann::json block = {{"address", b->address},
                              {"size", b->size},
                              {"requested_size", b->requested},
                              {"state", state_name(b->state)}};
      if (b->state == BlockState::kAllocated) block["category"] = memory_category_name(b->category);
      blocks.push_back(std::move(block));
    }
    segments.push_back({{"address", segment->base},
                        {"size", segment->size},
                        {"stream", segment->stream},
                        {"pool", segment->pool->is_small ? "small" : "large"},
                        {"private_pool", segment->pool->owner},
                        {"expandable", segment->expandable},
                        {"allocated_bytes", allocated},
                        {"active_bytes", active},
                        {"blocks", std::move(blocks)}});
  }
  snapshot["segments"] = std::move(segments);
  return snapshot.dump(2);
}

// Called with mutex_ held.
std::string CachingAllocator::out_of_memory_message(size_t requested, StreamId stream) const {
  const size_t allocated = stats_.allocated_bytes, reserved = stats_.reserved_bytes;
  std::string limit;
  if (memory_limit_ != std::numeric_limits<size_t>::max()) {
    limit =
        fmt::format(", under a limit of {} (memory fraction {:.2f})", format_bytes(memory_limit_), fraction_);
  }
  std::string message = fmt::format(
      "CUDA out of memory on cuda:{}: tried to allocate {} on stream {:#x}. nabla has {} allocated and {} "
      "reserved "
      "({} cached but unallocated){}; the device has {} free of {} total.",
      device_index_, format_bytes(requested), stream, format_bytes(allocated), format_bytes(reserved),
      format_bytes(reserved - allocated), limit, format_bytes(device_.free_memory()),
      format_bytes(device_.total_memory()));
  if (!captures_.empty()) {
    message += " The cache was not freed because a CUDA graph capture is underway.";
  } else if (reserved - allocated > reserved / 4 && reserved - allocated > requested) {
    message +=
        " Much reserved memory is cached but unusable for this request; setting NABLA_CUDA_ALLOC_CONF="
        "expandable_segments:true or max_split_size_mb:N may reduce fragmentation.";
  }
  return message;
}

void CachingAllocator::check_invariants() const {
  std::lock_guard lock(mutex_);
  size_t reserved = 0, allocated = 0, active = 0, requested = 0, num_allocated = 0, num_free = 0;
  std::array<size_t, kNumMemoryCategories> by_category{};
  for (const auto& [base, segment] : segments_) {
    NABLA_ASSERT(base == segment->base);
    reserved += segment->size;
    uintptr_t expected = segment->base;
    const Block* prev = nullptr;
    for (const Block* b = segment->first; b; prev = b, b = b->next) {
      NABLA_ASSERT(b->address == expected && b->size > 0 && b->size % kMinBlockSize == 0, "block layout");
      NABLA_ASSERT(b->prev == prev && b->segment == segment.get() && b->stream == segment->stream);
      expected += b->size;
      const bool in_pool = segment->pool->free_blocks.contains(const_cast<Block*>(b));
      if (b->state == BlockState::kFree) {
        NABLA_ASSERT(in_pool, "a free block is missing from its pool");
        NABLA_ASSERT(!prev || prev->state != BlockState::kFree, "two free neighbours were not merged");
        ++num_free;
        continue;
      }
      NABLA_ASSERT(!in_pool, "a block in use is in a pool");
      active += b->size;
      if (b->state == BlockState::kAllocated) {
        NABLA_ASSERT(allocated_blocks_.at(b->address) == b);
        allocated += b->size;
        requested += b->requested;
        by_category[MemoryCategoryStats::index(b->category)] += b->size;
        ++num_allocated;
      }
    }
    NABLA_ASSERT(expected == segment->base + segment->size, "blocks do not cover their segment");
    NABLA_ASSERT(segment->first || (segment->expandable && segment->size == 0));
  }
  size_t pooled = small_pool_->free_blocks.size() + large_pool_->free_blocks.size();
  for (const auto& [id, pool] : private_pools_)
    pooled += pool->small.free_blocks.size() + pool->large.free_blocks.size();
  NABLA_ASSERT(pooled == num_free, "a pool holds a block that is not free");
  NABLA_ASSERT(num_allocated == allocated_blocks_.size());
  NABLA_ASSERT(reserved == stats_.reserved_bytes && allocated == stats_.allocated_bytes, "byte counts");
  NABLA_ASSERT(active == stats_.active_bytes && requested == stats_.requested_bytes, "byte counts");
  NABLA_ASSERT(segments_.size() == stats_.num_segments);
  const MemoryCategoryStats categories = categories_.stats();
  NABLA_ASSERT(categories.current == by_category && categories.total == allocated, "category byte counts");
}

}  // namespace nabla::cuda
