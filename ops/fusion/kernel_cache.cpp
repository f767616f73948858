#include "nabla/ops/fusion/kernel_cache.h"

#include <unistd.h>

#include <array>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <system_error>

#include <fmt/format.h>

#include "nabla/core/logging.h"
#include "nabla/ops/fusion/codegen.h"

namespace nabla::ops::fusion {

namespace {

// The file's header: magic, then key, payload size and payload checksum, little-endian u64s.
constexpr std::array<char, 8> kMagic = {'N', 'B', 'L', 'A', 'K', 'C', '0', '1'};
constexpr size_t kHeaderBytes = kMagic.size() + 3 * sizeof(uint64_t);

void put_u64(std::string& out, uint64_t v) {
  for (int b = 0; b < 8; ++b) out.push_back(static_cast<char>((v >> (8 * b)) & 0xff));
}

uint64_t get_u64(const char* p) {
  uint64_t v = 0;
  for (int b = 7; b >= 0; --b) v = (v << 8) | static_cast<unsigned char>(p[b]);
  return v;
}

}  // namespace

std::filesystem::path KernelCache::path_of(uint64_t key) const {
  return dir_ / fmt::format("{:016x}.nkc", key);
}

std::optional<std::string> KernelCache::load(uint64_t key) const {
  const auto path = path_of(key);
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;  // not compiled yet: the usual miss, no warning
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto damaged = [&](const char* why) {
    NABLA_LOG_WARN("kernel cache: {} is {}; compiling its kernels again", path.string(), why);
    return std::nullopt;
  };
  if (bytes.size() < kHeaderBytes) return damaged("shorter than its header");
  if (std::memcmp(bytes.data(), kMagic.data(), kMagic.size()) != 0)
    return damaged("not a nabla kernel cache file");
  const char* h = bytes.data() + kMagic.size();
  if (get_u64(h) != key) return damaged("filed under another key");
  const uint64_t size = get_u64(h + 8), checksum = get_u64(h + 16);
  if (bytes.size() - kHeaderBytes != size) return damaged("truncated or padded");
  std::string payload = bytes.substr(kHeaderBytes);
  if (fnv1a(payload) != checksum) return damaged("damaged (its checksum does not match)");
  return payload;
}

bool KernelCache::store(uint64_t key, const std::string& payload) const {
  std::error_code error;
  std::filesystem::create_directories(dir_, error);
  std::string bytes(kMagic.begin(), kMagic.end());
  put_u64(bytes, key);
  put_u64(bytes, payload.size());
  put_u64(bytes, fnv1a(payload));
  bytes += payload;
  // A name of this process's own, renamed over the final one: readers see all or nothing.
  const auto final_path = path_of(key);
  const auto temporary = dir_ / fmt::format(".{:016x}.{}.tmp", key, static_cast<long>(::getpid()));
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    out.flush();
    if (!out) {
      std::filesystem::remove(temporary, error);
      NABLA_LOG_WARN("kernel cache: cannot write {}; kernels will be compiled again next run",
                     temporary.string());
      return false;
    }
  }
  std::filesystem::rename(temporary, final_path, error);
  if (error) {
    std::filesystem::remove(temporary, error);
    NABLA_LOG_WARN("kernel cache: cannot move a kernel into {}: {}", final_path.string(), error.message());
    return false;
  }
  return true;
}

std::filesystem::path default_kernel_cache_dir() {
  const auto env = [](const char* name) -> const char* {
    const char* v = std::getenv(name);
    return v != nullptr && *v != '\0' ? v : nullptr;
  };
  if (const char* dir = env("NABLA_KERNEL_CACHE")) return dir;
  if (const char* xdg = env("XDG_CACHE_HOME")) return std::filesystem::path(xdg) / "nabla" / "kernels";
  if (const char* home = env("HOME")) return std::filesystem::path(home) / ".cache" / "nabla" / "kernels";
  std::error_code error;
  return std::filesystem::temp_directory_path(error) / "nabla-kernels";
}

}  // namespace nabla::ops::fusion
