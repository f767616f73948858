// nvJPEG opened on first use (nvjpeg.h).
#include "nabla/data/cuda/nvjpeg.h"

#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <cstdlib>
#include <vector>

#include <fmt/format.h>

namespace nabla::data::cuda::nvjpeg {

namespace {

struct Loaded {
  Api api{};
  bool ok = false;
  std::string reason;
};

template <typename Fn>
bool resolve(void* library, const char* symbol, Fn& slot, std::string& missing) {
  slot = reinterpret_cast<Fn>(dlsym(library, symbol));
  if (slot == nullptr) missing += missing.empty() ? symbol : fmt::format(", {}", symbol);
  return slot != nullptr;
}

// The names to try, in order: NABLA_NVJPEG's path, the soname of this build's CUDA major, the
// unversioned link, and the toolkit's. Another major's library is never taken: it goes with
// another CUDA runtime.
std::vector<std::string> candidates() {
  std::vector<std::string> names;
  if (const char* path = std::getenv("NABLA_NVJPEG"); path != nullptr && *path != '\0')
    names.emplace_back(path);
  const int major = CUDART_VERSION / 1000;
  names.push_back(fmt::format("libnvjpeg.so.{}", major));
  names.emplace_back("libnvjpeg.so");
#ifdef NABLA_CUDA_LIBRARY_DIR
  names.push_back(fmt::format("{}/libnvjpeg.so.{}", NABLA_CUDA_LIBRARY_DIR, major));
#endif
  return names;
}

Loaded load() {
  Loaded result;
  void* library = nullptr;
  std::string tried;
  for (const std::string& name : candidates()) {
    library = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (library != nullptr) break;
    const char* why = dlerror();
    tried += fmt::format("\n  {}: {}", name, why != nullptr ? why : "not found");
  }
  if (library == nullptr) {
    result.reason = fmt::format(
        "nvJPEG could not be loaded (set NABLA_NVJPEG to the path of libnvjpeg.so, or put its directory "
        "on LD_LIBRARY_PATH; it ships with the CUDA toolkit and in the nvidia-nvjpeg wheels):{}",
        tried);
    return result;
  }
  Api& a = result.api;
  std::string missing;
  resolve(library, "nvjpegCreateEx", a.create_ex, missing);
  resolve(library, "nvjpegDestroy", a.destroy, missing);
  resolve(library, "nvjpegJpegStateCreate", a.state_create, missing);
  resolve(library, "nvjpegJpegStateDestroy", a.state_destroy, missing);
  resolve(library, "nvjpegDecodeBatchedInitialize", a.batched_initialize, missing);
  resolve(library, "nvjpegDecodeBatched", a.decode_batched, missing);
  resolve(library, "nvjpegDecode", a.decode, missing);
  resolve(library, "nvjpegJpegStreamCreate", a.stream_create, missing);
  resolve(library, "nvjpegJpegStreamDestroy", a.stream_destroy, missing);
  resolve(library, "nvjpegJpegStreamParse", a.stream_parse, missing);
  resolve(library, "nvjpegDecodeBatchedSupported", a.batched_supported, missing);
  resolve(library, "nvjpegGetProperty", a.get_property, missing);
  if (!missing.empty()) {
    result.reason = fmt::format("the nvJPEG library found lacks {}: it is older than CUDA 11", missing);
    return result;
  }
  result.ok = true;
  return result;
}

const Loaded& loaded() {
  static const Loaded once = load();
  return once;
}

}  // namespace

const char* status_name(int status) {
  switch (status) {
    case kSuccess:
      return "success";
    case kNotInitialized:
      return "not initialized";
    case kInvalidParameter:
      return "invalid parameter";
    case kBadJpeg:
      return "bad JPEG";
    case kJpegNotSupported:
      return "JPEG not supported";
    case kAllocatorFailure:
      return "allocator failure";
    case kExecutionFailed:
      return "execution failed";
    case kArchMismatch:
      return "architecture mismatch (no such backend on this GPU)";
    case kInternalError:
      return "internal error";
    case kImplementationNotSupported:
      return "implementation not supported";
    case kIncompleteBitstream:
      return "incomplete bitstream";
    default:
      return "unknown status";
  }
}

const Api* api() {
  return loaded().ok ? &loaded().api : nullptr;
}

const std::string& unavailable_reason() {
  return loaded().reason;
}

std::string version() {
  const Api* a = api();
  if (a == nullptr) return "";
  int major = 0, minor = 0, patch = 0;
  a->get_property(0, &major);
  a->get_property(1, &minor);
  a->get_property(2, &patch);
  return fmt::format("{}.{}.{}", major, minor, patch);
}

}  // namespace nabla::data::cuda::nvjpeg
