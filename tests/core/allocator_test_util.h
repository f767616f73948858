// Helpers for the caching allocator's tests: sizes, addresses and snapshot parsing.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>

#include "nabla/core/cuda/caching_allocator.h"
#include "nabla/core/cuda/simulated_device.h"
#include "test_util.h"

namespace nabla::cuda::testing {

inline constexpr size_t kKiB = size_t{1} << 10;
inline constexpr size_t kMiB = size_t{1} << 20;
inline constexpr size_t kGiB = size_t{1} << 30;

inline uintptr_t address_of(void* p) {
  return reinterpret_cast<uintptr_t>(p);
}

inline size_t ceil_to(size_t n, size_t multiple) {
  return (n / multiple + (n % multiple != 0)) * multiple;
}

inline nlohmann::json snapshot_of(const CachingAllocator& allocator) {
  return nlohmann::json::parse(allocator.memory_snapshot());
}

// The blocks of the segment holding `p` in a snapshot, or an empty array.
inline nlohmann::json segment_holding(const nlohmann::json& snapshot, void* p) {
  for (const auto& segment : snapshot["segments"]) {
    uintptr_t base = segment["address"];
    size_t size = segment["size"];
    if (address_of(p) >= base && address_of(p) < base + size) return segment;
  }
  return nlohmann::json::object();
}

}  // namespace nabla::cuda::testing
