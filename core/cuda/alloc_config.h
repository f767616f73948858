// Internal (core/cuda). The CUDA allocator's configuration and its parser.
//
// NABLA_CUDA_ALLOC_CONF holds comma-separated key:value pairs, for example
//   NABLA_CUDA_ALLOC_CONF="backend:caching,max_split_size_mb:256,garbage_collection_threshold:0.8"
// Keys: backend (caching | native), max_split_size_mb (an integer > 20),
// garbage_collection_threshold (a number strictly between 0 and 1) and expandable_segments
// (true | false). A bad key or value is an error naming it and what is allowed, never ignored:
// a silently ignored typo would leave a user debugging memory behaviour they did not ask for.
#pragma once

#include <cstddef>
#include <limits>
#include <string>
#include <string_view>

namespace nabla::cuda {

enum class AllocBackend {
  kCaching,  // the CachingAllocator (the default)
  kNative,   // a cudaMalloc / cudaFree per tensor, for debugging with compute-sanitizer
};

inline constexpr size_t kNoMaxSplitSize = std::numeric_limits<size_t>::max();

struct AllocConfig {
  AllocBackend backend = AllocBackend::kCaching;
  // Cached blocks of at least this many bytes are never split (kNoMaxSplitSize: no limit).
  size_t max_split_size = kNoMaxSplitSize;
  // When in (0, 1): free least recently used cached segments before reserved memory would pass
  // this fraction of the limit. 0 turns garbage collection off.
  double garbage_collection_threshold = 0.0;
  // Grow one virtual-memory segment per stream in place instead of allocating new segments.
  bool expandable_segments = false;
};

// Parses the NABLA_CUDA_ALLOC_CONF syntax. An empty string gives the defaults.
AllocConfig parse_alloc_config(std::string_view text);
// parse_alloc_config() of the NABLA_CUDA_ALLOC_CONF environment variable (defaults if unset).
AllocConfig alloc_config_from_env();
// The canonical text of a config, parseable by parse_alloc_config (for summaries and logs).
std::string to_string(const AllocConfig& config);

}  // namespace nabla::cuda
