// copy_bytes_many: many device-to-device byte copies in one kernel launch. DDP moves each
// parameter's fresh gradient into its bucket this way, a bucket at a time: one launch instead of
// one copy per parameter, most of which are small (BatchNorm's weights and biases), where the
// fixed cost of each launch, not the bytes, would set the time.
//
// The copies go in tables of up to kMaxCopies (ops/cuda/elementwise/tensor_table.cuh), each copy in 16-byte
// words where both addresses and the size allow it, else in 4-byte words, else in bytes.
#include <cuda_runtime.h>

#include <cstdint>

#include "nabla/ops/cuda/elementwise/kernels.h"
#include "nabla/ops/cuda/elementwise/tensor_table.cuh"

namespace nabla::ops::cuda {

namespace {

constexpr int kMaxCopies = 120;
constexpr TableLaunch kLaunch{.block = 256, .max_blocks_x = 512};

struct CopyEntry {
  char* dst;
  const char* src;
  int64_t units;  // in words of `unit` bytes
  int32_t unit;   // 16, 4 or 1
};
using CopyTable = EntryTable<CopyEntry, kMaxCopies>;

template <typename Word>
__device__ __forceinline__ void copy_words(const CopyEntry& e) {
  auto* dst = reinterpret_cast<Word*>(e.dst);
  const auto* src = reinterpret_cast<const Word*>(e.src);
  for_grid_stride(e.units, [&](int64_t i) { dst[i] = src[i]; });
}

__global__ void __launch_bounds__(kLaunch.block) copy_many_kernel(CopyTable table) {
  const CopyEntry e = table.entries[blockIdx.y];
  if (e.unit == 16) {
    copy_words<uint4>(e);
  } else if (e.unit == 4) {
    copy_words<uint32_t>(e);
  } else {
    copy_words<unsigned char>(e);
  }
}

int32_t widest_unit(const void* dst, const void* src, size_t bytes) {
  const auto bits = reinterpret_cast<uintptr_t>(dst) | reinterpret_cast<uintptr_t>(src) | bytes;
  if (bits % 16 == 0) return 16;
  if (bits % 4 == 0) return 4;
  return 1;
}

}  // namespace

void copy_bytes_many(const std::vector<ByteCopy>& copies, int device) {
  if (copies.empty()) return;
  const LaunchScope scope(device);
  launch_tables<kMaxCopies, CopyEntry>(
      copies.size(), kLaunch,
      [&](size_t i, CopyEntry& e) {
        const ByteCopy& c = copies[i];
        const int32_t unit = widest_unit(c.dst, c.src, c.bytes);
        const auto units = static_cast<int64_t>(c.bytes / static_cast<size_t>(unit));
        e = {static_cast<char*>(c.dst), static_cast<const char*>(c.src), units, unit};
        return units;
      },
      [&](const CopyTable& table, dim3 grid) {
        copy_many_kernel<<<grid, kLaunch.block, 0, scope.stream()>>>(table);
      });
}

}  // namespace nabla::ops::cuda
