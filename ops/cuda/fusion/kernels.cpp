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
#include "nabla/ops/cuda/reduce/geometry.h"
#include "nabla/ops/cuda/reduce/layout.h"
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

// Loads a CUBIN on the current device and looks up its kernels; false (with the error cleared)
// when the driver rejects it.
bool try_load(const std::string& cubin, const ops::fusion::KernelSource& source, LoadedKernel* out,
              std::string* error) {
  cudaLibrary_t library = nullptr;
  cudaError_t e = cudaLibraryLoadData(&library, cubin.data(), nullptr, nullptr, 0, nullptr, nullptr, 0);
  if (e != cudaSuccess) {
    *error = cudaGetErrorString(e);
    (void)cudaGetLastError();
    return false;
  }
  cudaKernel_t kernel = nullptr, partials = nullptr;
  e = cudaLibraryGetKernel(&kernel, library, source.name.c_str());
  if (e == cudaSuccess && source.is_reduction()) {
    e = cudaLibraryGetKernel(&partials, library, source.partials_name().c_str());
  }
  if (e != cudaSuccess) {
    *error = cudaGetErrorString(e);
    (void)cudaGetLastError();
    (void)cudaLibraryUnload(library);
    return false;
  }
  // The library stays loaded for the process, as its kernels may be in graphs.
  out->handle = reinterpret_cast<void*>(kernel);
  out->partials = reinterpret_cast<void*>(partials);
  return true;
}

void launch_on(const LoadedKernel& kernel, void* handle, dim3 grid, dim3 block, void** args) {
  int previous = 0;
  NABLA_CUDA_CHECK(cudaGetDevice(&previous));
  if (previous != kernel.device) NABLA_CUDA_CHECK(cudaSetDevice(kernel.device));
  const auto stream = static_cast<cudaStream_t>(nabla::cuda::current_stream(kernel.device).handle());
  const cudaError_t launched =
      cudaLaunchKernel(static_cast<const void*>(handle), grid, block, args, 0, stream);
  if (previous != kernel.device) NABLA_CUDA_CHECK(cudaSetDevice(previous));
  NABLA_CUDA_CHECK(launched);
}

// A generated reduction: the launch the eager kernel would make for the same block.
void launch_reduction(const LoadedKernel& kernel, const ops::fusion::KernelSource& source,
                      std::vector<void*>& block) {
  const reduction::LaunchShape shape =
      reduction::plan_launch(source.a, source.o, source.b, source.i, sm_count(kernel.device), source.vector);
  reduction::Geometry g = shape.g;
  NABLA_ASSERT(!source.one_pass || (shape.rows && g.splits == 1 && g.a == 1),
               "fused kernel {}: a one-pass row reduction planned with {} splits", source.name, g.splits);
  Tensor partial_buffer;  // freed after the launches; the caching allocator orders reuse on the stream
  void* partial = nullptr;
  if (g.splits > 1) {
    partial_buffer = Tensor::empty({g.outputs * g.splits * source.acc_bytes},
                                   {.dtype = kUInt8, .device = Device::cuda(kernel.device)});
    partial = partial_buffer.data_ptr();
  }
  void* args[] = {block.data(), &g, &partial};
  launch_on(kernel, kernel.handle, dim3(shape.grid_x, shape.grid_y), dim3(shape.block_x, shape.block_y),
            args);
  if (partial != nullptr) {
    long long outputs = g.outputs, splits = g.splits;
    void* fold_args[] = {block.data(), &partial, &outputs, &splits};
    launch_on(kernel, kernel.partials, dim3(static_cast<unsigned>(reduction::ceil_div(g.outputs, 8))),
              dim3(32, 8), fold_args);
  }
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
  LoadedKernel loaded{.device = device};
  bool ok = false;
  if (auto cubin = cache.load(key)) {
    ok = try_load(*cubin, source, &loaded, &error);
    if (ok) {
      ++s.stats.from_disk;
    } else {
      NABLA_LOG_WARN("kernel cache: {} does not load on this driver ({}); compiling it again",
                     cache.path_of(key).string(), error);
    }
  }
  if (!ok) {
    const auto start = std::chrono::steady_clock::now();
    const std::string cubin = compile_to_cubin(source.source, arch);
    s.stats.compile_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    ++s.stats.compiled;
    ok = try_load(cubin, source, &loaded, &error);
    NABLA_CHECK(ok, "a kernel NVRTC compiled for sm_{} does not load: {}", arch, error);
    cache.store(key, cubin);
  }
  s.loaded.emplace(std::make_pair(key, device), loaded);
  return loaded;
}

void launch_kernel(const LoadedKernel& kernel, const ops::fusion::KernelSource& source,
                   std::span<void* const> pointers) {
  NABLA_ASSERT(pointers.size() == source.operands.size(), "fused kernel {}: {} pointers for {} operands",
               source.name, pointers.size(), source.operands.size());
  if (source.numel == 0) return;
  // The kernel's first parameter is Pointers<K>: K pointers, passed by value.
  std::vector<void*> block(pointers.begin(), pointers.end());
  if (source.is_reduction()) {
    launch_reduction(kernel, source, block);
    return;
  }
  void* args[] = {block.data()};
  const int64_t per_block = ops::fusion::kFusedBlockSize;
  const int64_t per_launch_block = per_block * source.per_thread;
  const int64_t blocks =
      std::min<int64_t>((source.numel + per_launch_block - 1) / per_launch_block, int64_t{65535} * 8);
  launch_on(kernel, kernel.handle, dim3(static_cast<unsigned>(blocks)),
            dim3(static_cast<unsigned>(per_block)), args);
}

const LoadStats& load_stats() {
  return state().stats;
}

}  // namespace nabla::ops::cuda::fusion
