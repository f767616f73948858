// Parses NABLA_CUDA_ALLOC_CONF. Every failure names the offending part and lists what is allowed.
#include "nabla/core/cuda/alloc_config.h"

#include <charconv>
#include <cstdlib>
#include <set>

#include "nabla/core/error.h"

namespace nabla::cuda {

namespace {

constexpr const char* kAllowedKeys =
    "backend, max_split_size_mb, garbage_collection_threshold, expandable_segments";
// PyTorch's lower bound, for the same reason: a limit at or below the 20 MiB buffer that medium
// requests round up to would forbid splitting those buffers, which only wastes memory.
constexpr size_t kMinMaxSplitSizeMb = 20;
constexpr size_t kMiB = size_t{1} << 20;

std::string_view trim(std::string_view s) {
  const char* kSpace = " \t\n\r";
  size_t begin = s.find_first_not_of(kSpace);
  if (begin == std::string_view::npos) return {};
  size_t end = s.find_last_not_of(kSpace);
  return s.substr(begin, end - begin + 1);
}

AllocBackend parse_backend(std::string_view value) {
  if (value == "caching") return AllocBackend::kCaching;
  if (value == "native") return AllocBackend::kNative;
  NABLA_CHECK(false,
              "NABLA_CUDA_ALLOC_CONF: backend:{} is not valid; expected backend:caching or backend:native",
              value);
  __builtin_unreachable();
}

size_t parse_max_split_size(std::string_view value) {
  size_t mb = 0;
  auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), mb);
  bool is_integer = ec == std::errc() && end == value.data() + value.size() && !value.empty();
  NABLA_CHECK(is_integer && mb > kMinMaxSplitSizeMb && mb <= kNoMaxSplitSize / kMiB,
              "NABLA_CUDA_ALLOC_CONF: max_split_size_mb:{} is not valid; expected an integer number of MiB "
              "greater than {}",
              value, kMinMaxSplitSizeMb);
  return mb * kMiB;
}

double parse_gc_threshold(std::string_view value) {
  double t = 0.0;
  auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), t);
  bool is_number = ec == std::errc() && end == value.data() + value.size() && !value.empty();
  NABLA_CHECK(
      is_number && t > 0.0 && t < 1.0,
      "NABLA_CUDA_ALLOC_CONF: garbage_collection_threshold:{} is not valid; expected a number strictly "
      "between 0 and 1",
      value);
  return t;
}

bool parse_bool(std::string_view key, std::string_view value) {
  if (value == "true") return true;
  if (value == "false") return false;
  NABLA_CHECK(false, "NABLA_CUDA_ALLOC_CONF: {}:{} is not valid; expected {}:true or {}:false", key, value,
              key, key);
  __builtin_unreachable();
}

}  // namespace

AllocConfig parse_alloc_config(std::string_view text) {
  AllocConfig config;
  if (trim(text).empty()) return config;
  std::set<std::string_view> seen;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t comma = text.find(',', pos);
    if (comma == std::string_view::npos) comma = text.size();
    std::string_view item = trim(text.substr(pos, comma - pos));
    pos = comma + 1;
    NABLA_CHECK(!item.empty(),
                "NABLA_CUDA_ALLOC_CONF: \"{}\" has an empty entry; expected key:value pairs "
                "separated by commas, with keys {}",
                text, kAllowedKeys);
    size_t colon = item.find(':');
    NABLA_CHECK(colon != std::string_view::npos,
                "NABLA_CUDA_ALLOC_CONF: \"{}\" is not a key:value pair; allowed keys are {}", item,
                kAllowedKeys);
    std::string_view key = trim(item.substr(0, colon));
    std::string_view value = trim(item.substr(colon + 1));
    NABLA_CHECK(seen.insert(key).second, "NABLA_CUDA_ALLOC_CONF: key {} is given more than once", key);
    if (key == "backend") {
      config.backend = parse_backend(value);
    } else if (key == "max_split_size_mb") {
      config.max_split_size = parse_max_split_size(value);
    } else if (key == "garbage_collection_threshold") {
      config.garbage_collection_threshold = parse_gc_threshold(value);
    } else if (key == "expandable_segments") {
      config.expandable_segments = parse_bool(key, value);
    } else {
      NABLA_CHECK(false, "NABLA_CUDA_ALLOC_CONF: unknown key \"{}\"; allowed keys are {}", key, kAllowedKeys);
    }
  }
  return config;
}

AllocConfig alloc_config_from_env() {
  const char* text = std::getenv("NABLA_CUDA_ALLOC_CONF");
  return text ? parse_alloc_config(text) : AllocConfig{};
}

std::string to_string(const AllocConfig& config) {
  std::string text = config.backend == AllocBackend::kCaching ? "backend:caching" : "backend:native";
  if (config.max_split_size != kNoMaxSplitSize) {
    text += fmt::format(",max_split_size_mb:{}", config.max_split_size / kMiB);
  }
  if (config.garbage_collection_threshold > 0.0) {
    text += fmt::format(",garbage_collection_threshold:{}", config.garbage_collection_threshold);
  }
  text += config.expandable_segments ? ",expandable_segments:true" : ",expandable_segments:false";
  return text;
}

}  // namespace nabla::cuda
