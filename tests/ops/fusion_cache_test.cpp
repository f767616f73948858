// The compiled-kernel cache (ops/fusion/kernel_cache.h): what it stores it gives back, and a file
// that is damaged, truncated, foreign or filed under another key reads as absent, never as a
// kernel.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>

#include "nabla/ops/fusion/kernel_cache.h"

namespace nabla::ops::fusion {
namespace {

namespace fs = std::filesystem;

class KernelCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("nabla-kernel-cache-test-" + std::to_string(::getpid()));
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  static std::string random_payload(size_t n) {
    std::mt19937 rng(std::random_device{}());
    std::string s(n, '\0');
    for (char& c : s) c = static_cast<char>(rng() & 0xff);
    return s;
  }
  std::string read(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  }
  void write(const fs::path& p, const std::string& bytes) {
    std::ofstream(p, std::ios::binary | std::ios::trunc) << bytes;
  }

  fs::path dir_;
};

TEST_F(KernelCacheTest, GivesBackWhatItStored) {
  KernelCache cache(dir_);
  const std::string payload = random_payload(4099);
  EXPECT_FALSE(cache.load(42).has_value());
  ASSERT_TRUE(cache.store(42, payload));
  const auto back = cache.load(42);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(*back, payload);
  EXPECT_FALSE(cache.load(43).has_value());
  // No temporary file is left behind.
  int files = 0;
  for (const auto& entry : fs::directory_iterator(dir_)) files += entry.is_regular_file() ? 1 : 0;
  EXPECT_EQ(files, 1);
}

TEST_F(KernelCacheTest, DamagedTruncatedAndForeignFilesReadAsAbsent) {
  KernelCache cache(dir_);
  const std::string payload = random_payload(512);
  ASSERT_TRUE(cache.store(7, payload));
  const fs::path file = cache.path_of(7);
  const std::string good = read(file);

  std::string flipped = good;
  flipped[good.size() - 100] = static_cast<char>(flipped[good.size() - 100] ^ 0x10);
  write(file, flipped);
  EXPECT_FALSE(cache.load(7).has_value()) << "a flipped payload byte";

  write(file, good.substr(0, good.size() - 1));
  EXPECT_FALSE(cache.load(7).has_value()) << "one byte short";

  write(file, good.substr(0, 10));
  EXPECT_FALSE(cache.load(7).has_value()) << "shorter than the header";

  write(file,
        "\x7f"
        "ELF not a cache file at all, but long enough to have a header");
  EXPECT_FALSE(cache.load(7).has_value()) << "a foreign file";

  write(cache.path_of(8), good);  // key 7's file under key 8's name
  EXPECT_FALSE(cache.load(8).has_value()) << "a file filed under another key";

  write(file, good);
  EXPECT_TRUE(cache.load(7).has_value()) << "the intact file again";
}

TEST_F(KernelCacheTest, AnUnwritableCacheFailsTheStoreOnly) {
  fs::create_directories(dir_.parent_path());
  write(dir_, "a file where the cache folder should be");
  KernelCache cache(dir_ / "kernels");
  EXPECT_FALSE(cache.store(1, "payload"));
  EXPECT_FALSE(cache.load(1).has_value());
  fs::remove(dir_);
}

TEST(KernelCacheDir, TheEnvironmentChoosesTheFolder) {
  const char* saved = std::getenv("NABLA_KERNEL_CACHE");
  const std::string before = saved ? saved : "";
  ::setenv("NABLA_KERNEL_CACHE", "/tmp/some/where", 1);
  EXPECT_EQ(default_kernel_cache_dir(), fs::path("/tmp/some/where"));
  ::unsetenv("NABLA_KERNEL_CACHE");
  const char* home = std::getenv("HOME");
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  if (xdg == nullptr && home != nullptr) {
    EXPECT_EQ(default_kernel_cache_dir(), fs::path(home) / ".cache" / "nabla" / "kernels");
  }
  if (saved) ::setenv("NABLA_KERNEL_CACHE", before.c_str(), 1);
}

}  // namespace
}  // namespace nabla::ops::fusion
