// Internal (ops/cuda/fusion). Generated kernels made runnable: compiled with NVRTC or taken from
// the disk cache (ops/fusion/kernel_cache.h), loaded on a device, launched on the current stream.
// Plain C++ (no CUDA types), so the step compiler's front end compiles without nvcc.
#pragma once

#include <span>
#include <string>

#include "nabla/ops/fusion/codegen.h"

namespace nabla::ops::cuda::fusion {

// A kernel loaded on one device (a cudaKernel_t).
struct LoadedKernel {
  void* handle = nullptr;
  void* partials = nullptr;  // a reduction's second kernel (KernelSource::partials_name)
  int device = -1;
};

struct LoadStats {
  int compiled = 0;      // programs NVRTC compiled in this process
  int from_disk = 0;     // programs read from the disk cache
  double compile_s = 0;  // seconds spent in NVRTC
};

// The kernel of `source` on `device`: from this process's memory, the disk cache, or NVRTC, in
// that order. Throws nabla::Error naming the cause when it cannot be had (no NVRTC, a compile
// error; or, with may_load false, a kernel not loaded yet: loading a module is no operation a
// graph capture may hold); the caller then runs the group unfused.
LoadedKernel load_kernel(const ops::fusion::KernelSource& source, int device, bool may_load = true);

// Launches it over source.numel elements, `pointers` in source.operands' order, on the device's
// current stream (and so into a graph being captured there). A reduction is launched as the
// eager one would be (reduce/geometry.h), with its partials in a temporary from the caching
// allocator when it splits.
void launch_kernel(const LoadedKernel& kernel, const ops::fusion::KernelSource& source,
                   std::span<void* const> pointers);

const LoadStats& load_stats();

}  // namespace nabla::ops::cuda::fusion
