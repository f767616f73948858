// Internal (ops). The step compiler's cache of compiled kernels on disk, so a second run of the
// same step compiles nothing (Note [The kernel cache] in docs/design/step-compiler.md).
//
// One file per program, named by its key (a hash of the generated source, the toolchain and the
// target architecture). A file starts with a header naming the format, the key, the payload's
// size and checksum; a file that is short, foreign or damaged reads as absent, with a warning,
// and is compiled again. Files are written to a temporary name and renamed into place, so
// processes sharing the cache (DDP ranks) never read a half-written kernel.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

namespace nabla::ops::fusion {

class KernelCache {
 public:
  explicit KernelCache(std::filesystem::path dir) : dir_(std::move(dir)) {}

  // The payload stored under `key`, or nothing: absent, unreadable or damaged (then warns).
  std::optional<std::string> load(uint64_t key) const;
  // Stores `payload` under `key`. Returns false (and warns) when the cache cannot be written: a
  // read-only home, a full disk. The caller then simply compiles again next time.
  bool store(uint64_t key, const std::string& payload) const;

  std::filesystem::path path_of(uint64_t key) const;
  const std::filesystem::path& dir() const { return dir_; }

 private:
  std::filesystem::path dir_;
};

// $NABLA_KERNEL_CACHE, else $XDG_CACHE_HOME/nabla/kernels, else $HOME/.cache/nabla/kernels,
// else a folder under the system's temporary directory.
std::filesystem::path default_kernel_cache_dir();

}  // namespace nabla::ops::fusion
