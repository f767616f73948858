// Internal (CUDA sources of ops, optim and amp). One kernel launch over many tensors: the launch
// carries a table of up to N entries in its kernel argument (kept under the 4 KB limit),
// blockIdx.y picks the entry and the x blocks grid-stride over its units. DDP's bucket copies,
// GradScaler's unscale and the fused optimizers launch this way, so that a model's hundreds of
// parameters, most of them small (BatchNorm's weights and biases), cost a few launches, not one
// each: for those, the fixed cost of a launch, not the bytes, would set the time.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "nabla/core/cuda/check.h"
#include "nabla/core/cuda/device_guard.h"
#include "nabla/core/cuda/stream.h"

namespace nabla::ops::cuda {

template <typename Entry, int N>
struct EntryTable {
  static_assert(sizeof(Entry) * N < 3900, "kernel arguments are limited to 4 KB");
  Entry entries[N];
};

// Calls f(i) for the calling thread's share of [0, units) in a grid-stride loop over the x blocks.
template <typename F>
__device__ __forceinline__ void for_grid_stride(int64_t units, F&& f) {
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < units;
       i += int64_t{gridDim.x} * blockDim.x)
    f(i);
}

// A launch's device made current for the scope, and that device's current stream.
class LaunchScope {
 public:
  explicit LaunchScope(int device)
      : guard_(device), stream_(static_cast<cudaStream_t>(nabla::cuda::current_stream(device).handle())) {}
  cudaStream_t stream() const { return stream_; }

 private:
  nabla::cuda::DeviceGuard guard_;
  cudaStream_t stream_ = nullptr;
};

struct TableLaunch {
  int block = 256;              // threads per block
  int64_t max_blocks_x = 1024;  // x blocks per entry at most (the rest is grid-stridden)
};

// Fills tables from items [0, count) and launches each: fill(i, entry) writes item i's entry and
// returns its units (0: the item needs no work and takes no slot); launch(table, grid) starts the
// kernel, whose grid has one y block per entry and x blocks for the largest entry's units.
template <int N, typename Entry, typename Fill, typename Launch>
void launch_tables(size_t count, TableLaunch shape, Fill&& fill, Launch&& launch) {
  size_t i = 0;
  while (i < count) {
    EntryTable<Entry, N> table{};
    int used = 0;
    int64_t most_units = 0;
    for (; i < count && used < N; ++i) {
      const int64_t units = fill(i, table.entries[used]);
      if (units == 0) continue;
      most_units = std::max(most_units, units);
      ++used;
    }
    if (used == 0) continue;
    const int64_t blocks =
        std::clamp<int64_t>((most_units + shape.block - 1) / shape.block, 1, shape.max_blocks_x);
    launch(table, dim3(static_cast<unsigned>(blocks), static_cast<unsigned>(used)));
    NABLA_CUDA_CHECK_LAUNCH();
  }
}

}  // namespace nabla::ops::cuda
