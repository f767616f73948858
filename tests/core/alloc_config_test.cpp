// NABLA_CUDA_ALLOC_CONF parsing: good strings give the stated settings, and every bad key or value
// is an error that names it and what is allowed.
#include <cstdlib>

#include "nabla/core/cuda/alloc_config.h"
#include "test_util.h"

namespace nabla::cuda {
namespace {

constexpr size_t kMiB = size_t{1} << 20;

TEST(AllocConfig, EmptyStringGivesTheDefaults) {
  for (const char* text : {"", "   "}) {
    AllocConfig config = parse_alloc_config(text);
    EXPECT_EQ(config.backend, AllocBackend::kCaching);
    EXPECT_EQ(config.max_split_size, kNoMaxSplitSize);
    EXPECT_EQ(config.garbage_collection_threshold, 0.0);
    EXPECT_FALSE(config.expandable_segments);
  }
}

TEST(AllocConfig, ParsesEveryKeyWithSpacesAroundItems) {
  AllocConfig config = parse_alloc_config(
      "backend:native, max_split_size_mb:256 ,garbage_collection_threshold: 0.75,expandable_segments:true");
  EXPECT_EQ(config.backend, AllocBackend::kNative);
  EXPECT_EQ(config.max_split_size, 256 * kMiB);
  EXPECT_DOUBLE_EQ(config.garbage_collection_threshold, 0.75);
  EXPECT_TRUE(config.expandable_segments);

  EXPECT_EQ(parse_alloc_config("backend:caching").backend, AllocBackend::kCaching);
  EXPECT_FALSE(parse_alloc_config("expandable_segments:false").expandable_segments);
}

TEST(AllocConfig, ToStringRoundTrips) {
  AllocConfig config{.backend = AllocBackend::kNative,
                     .max_split_size = 128 * kMiB,
                     .garbage_collection_threshold = 0.5,
                     .expandable_segments = true};
  EXPECT_EQ(to_string(config),
            "backend:native,max_split_size_mb:128,garbage_collection_threshold:0.5,"
            "expandable_segments:true");
  AllocConfig parsed = parse_alloc_config(to_string(config));
  EXPECT_EQ(parsed.backend, config.backend);
  EXPECT_EQ(parsed.max_split_size, config.max_split_size);
  EXPECT_EQ(parsed.garbage_collection_threshold, config.garbage_collection_threshold);
  EXPECT_EQ(parsed.expandable_segments, config.expandable_segments);
}

TEST(AllocConfig, UnknownKeyNamesItAndTheAllowedKeys) {
  EXPECT_NABLA_ERROR(parse_alloc_config("max_split_size:100"), "unknown key \"max_split_size\"", "backend",
                     "max_split_size_mb", "garbage_collection_threshold", "expandable_segments");
  EXPECT_NABLA_ERROR(parse_alloc_config("backend:caching,roundup_power2_divisions:4"),
                     "roundup_power2_divisions", "allowed keys");
}

TEST(AllocConfig, BadValuesNameThePartAndWhatIsAllowed) {
  EXPECT_NABLA_ERROR(parse_alloc_config("backend:cub"), "backend:cub", "caching", "native");
  EXPECT_NABLA_ERROR(parse_alloc_config("max_split_size_mb:abc"), "max_split_size_mb:abc", "integer");
  EXPECT_NABLA_ERROR(parse_alloc_config("max_split_size_mb:12.5"), "max_split_size_mb:12.5", "integer");
  EXPECT_NABLA_ERROR(parse_alloc_config("max_split_size_mb:-64"), "max_split_size_mb:-64");
  EXPECT_NABLA_ERROR(parse_alloc_config("max_split_size_mb:20"), "max_split_size_mb:20", "greater than 20");
  EXPECT_NABLA_ERROR(parse_alloc_config("garbage_collection_threshold:1.0"),
                     "garbage_collection_threshold:1.0", "between 0 and 1");
  EXPECT_NABLA_ERROR(parse_alloc_config("garbage_collection_threshold:0"), "garbage_collection_threshold:0");
  EXPECT_NABLA_ERROR(parse_alloc_config("garbage_collection_threshold:high"),
                     "garbage_collection_threshold:high");
  EXPECT_NABLA_ERROR(parse_alloc_config("expandable_segments:yes"), "expandable_segments:yes",
                     "expandable_segments:true", "expandable_segments:false");
}

TEST(AllocConfig, MalformedListsAreErrors) {
  EXPECT_NABLA_ERROR(parse_alloc_config("expandable_segments"),
                     "\"expandable_segments\" is not a key:value pair");
  EXPECT_NABLA_ERROR(parse_alloc_config("backend:native,,expandable_segments:true"), "empty entry");
  EXPECT_NABLA_ERROR(parse_alloc_config("backend:native,"), "empty entry");
  EXPECT_NABLA_ERROR(parse_alloc_config("backend:native,backend:caching"), "backend is given more than once");
}

TEST(AllocConfig, ReadsTheEnvironmentVariable) {
  const char* saved = std::getenv("NABLA_CUDA_ALLOC_CONF");
  std::string previous = saved ? saved : "";
  setenv("NABLA_CUDA_ALLOC_CONF", "expandable_segments:true,max_split_size_mb:64", 1);
  AllocConfig config = alloc_config_from_env();
  EXPECT_TRUE(config.expandable_segments);
  EXPECT_EQ(config.max_split_size, 64 * kMiB);
  setenv("NABLA_CUDA_ALLOC_CONF", "backend:gpu", 1);
  EXPECT_NABLA_ERROR(alloc_config_from_env(), "backend:gpu");
  unsetenv("NABLA_CUDA_ALLOC_CONF");
  EXPECT_FALSE(alloc_config_from_env().expandable_segments);
  if (saved) setenv("NABLA_CUDA_ALLOC_CONF", previous.c_str(), 1);
}

}  // namespace
}  // namespace nabla::cuda
