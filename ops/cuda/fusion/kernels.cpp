#include "nabla/ops/cuda/fusion/kernels.h"

#include <cuda_runtime.h>

#include <chrono>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "nabla/core/cuda/check.h"
#include "nabla/core/cuda/stream.h"
#include "nabla/core/error.h"
#include "nabla/core/logging.h"
#include "nabla/ops/cuda/fusion/nvrtc.h"
#include "nabla/ops/fusion/kernel_cache.h"

namespace nabla::ops::cuda::fusion {

namespace {

struct State {
  std::mutex mutex;
  std::map<std::pair<uint64_t, int>, LoadedKernel> loaded;  // (key, device)
  LoadStats stats;
};

State& state() {
  static State s;
  return s;
}

int arch_of(int device) {
  int major = 0, minor = 0;
  NABLA_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  NABLA_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  return major * 10 + minor;
}

// What the cache files the program under: its source, everything it is compiled with, the target.
uint64_t cache_key(const std::string& source, int arch) {
  uint64_t h = ops::fusion::fnv1a(source, toolchain_hash());
  return ops::fusion::fnv1a(fmt::format("sm_{} cudart {}", arch, CUDART_VERSION), h);
}

// Loads a CUBIN on the current device; nullopt (with the error cleared) when the driver rejects it.
cudaKernel_t try_load(const std::string& cubin, const std::string& name, std::string* error) {
  cudaLibrary_t library = nullptr;
  cudaError_t e = cudaLibraryLoadData(&library, cubin.data(), nullptr, nullptr, 0, nullptr, nullptr, 0);
  if (e != cudaSuccess) {
    *error = cudaGetErrorString(e);
    (void)cudaGetLastError();
    return nullptr;
  }
  cudaKernel_t kernel = nullptr;
  e = cudaLibraryGetKernel(&kernel, library, name.c_str());
  if (e != cudaSuccess) {
    *error = cudaGetErrorString(e);
    (void)cudaGetLastError();
    (void)cudaLibraryUnload(library);
    return nullptr;
  }
  return kernel;  // the library stays loaded for the process, as its kernels may be in graphs
}

}  // namespace

LoadedKernel load_kernel(const ops::fusion::KernelSource& source, int device, bool may_load) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  const int arch = arch_of(device);
  const uint64_t key = cache_key(source.source, arch);
  if (auto it = s.loaded.find({key, device}); it != s.loaded.end()) return it->second;
  NABLA_CHECK(
      may_load,
      "fused kernel {} was first needed during a CUDA graph capture, where it cannot be loaded (the "
      "warm-up call before the capture loads every kernel of a step that does the same work each call)",
      source.name);

  int previous = 0;
  NABLA_CUDA_CHECK(cudaGetDevice(&previous));
  if (previous != device) NABLA_CUDA_CHECK(cudaSetDevice(device));
  struct Restore {
    int previous, device;
    ~Restore() {
      if (previous != device) (void)cudaSetDevice(previous);
    }
  } restore{previous, device};

  const ops::fusion::KernelCache cache(ops::fusion::default_kernel_cache_dir());
  std::string error;
  cudaKernel_t kernel = nullptr;
  if (auto cubin = cache.load(key)) {
    kernel = try_load(*cubin, source.name, &error);
    if (kernel != nullptr) {
      ++s.stats.from_disk;
    } else {
      NABLA_LOG_WARN("kernel cache: {} does not load on this driver ({}); compiling it again",
                     cache.path_of(key).string(), error);
    }
  }
  if (kernel == nullptr) {
    const auto start = std::chrono::steady_clock::now();
    const std::string cubin = compile_to_cubin(source.source, arch);
    s.stats.compile_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    ++s.stats.compiled;
    kernel = try_load(cubin, source.name, &error);
    NABLA_CHECK(kernel != nullptr, "a kernel NVRTC compiled for sm_{} does not load: {}", arch, error);
    cache.store(key, cubin);
  }
  const LoadedKernel loaded{.handle = reinterpret_cast<void*>(kernel), .device = device};
  s.loaded.emplace(std::make_pair(key, device), loaded);
  return loaded;
}

void launch_kernel(const LoadedKernel& kernel, const ops::fusion::KernelSource& source,
                   std::span<void* const> pointers) {
  NABLA_ASSERT(pointers.size() == source.operands.size(), "fused kernel {}: {} pointers for {} operands",
               source.name, pointers.size(), source.operands.size());
  if (source.numel == 0) return;
  // The kernel's one parameter is Pointers<K>: K pointers, passed by value.
  std::vector<void*> block(pointers.begin(), pointers.end());
  void* args[] = {block.data()};
  const int64_t per_block = ops::fusion::kFusedBlockSize;
  const int64_t per_launch_block = per_block * source.per_thread;
  const int64_t blocks =
      std::min<int64_t>((source.numel + per_launch_block - 1) / per_launch_block, int64_t{65535} * 8);
  int previous = 0;
  NABLA_CUDA_CHECK(cudaGetDevice(&previous));
  if (previous != kernel.device) NABLA_CUDA_CHECK(cudaSetDevice(kernel.device));
  const auto stream = static_cast<cudaStream_t>(nabla::cuda::current_stream(kernel.device).handle());
  const cudaError_t launched =
      cudaLaunchKernel(static_cast<const void*>(kernel.handle), dim3(static_cast<unsigned>(blocks)),
                       dim3(static_cast<unsigned>(per_block)), args, 0, stream);
  if (previous != kernel.device) NABLA_CUDA_CHECK(cudaSetDevice(previous));
  NABLA_CUDA_CHECK(launched);
}

const LoadStats& load_stats() {
  return state().stats;
}

}  // namespace nabla::ops::cuda::fusion
