// copy_bytes_many: many device-to-device byte copies in one kernel launch. DDP moves each
// parameter's fresh gradient into its bucket this way, a bucket at a time: one launch instead of
// one copy per parameter, most of which are small (BatchNorm's weights and biases), where the
// fixed cost of each launch, not the bytes, would set the time.
//
// A launch carries a table of up to kMaxCopies copies in its kernel argument; blockIdx.y picks
// the copy and the x blocks grid-stride over it, in 16-byte words where both addresses and the
// size allow it, else in 4-byte words, else in bytes.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "nabla/core/cuda/check.h"
#include "nabla/core/cuda/device_guard.h"
#include "nabla/core/cuda/stream.h"
#include "nabla/ops/cuda/kernels.h"

namespace nabla::ops::cuda {

namespace {

constexpr int kMaxCopies = 120;
constexpr int kBlock = 256;
constexpr int64_t kMaxBlocksX = 512;

struct CopyEntry {
  char* dst;
  const char* src;
  int64_t units;  // in words of `unit` bytes
  int32_t unit;   // 16, 4 or 1
};
struct CopyTable {
  CopyEntry entries[kMaxCopies];
};
static_assert(sizeof(CopyTable) < 3900, "kernel arguments are limited to 4 KB");

template <typename Word>
__device__ __forceinline__ void copy_words(const CopyEntry& e) {
  auto* dst = reinterpret_cast<Word*>(e.dst);
  const auto* src = reinterpret_cast<const Word*>(e.src);
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < e.units;
       i += int64_t{gridDim.x} * blockDim.x) {
    dst[i] = src[i];
  }
}

__global__ void __launch_bounds__(kBlock) copy_many_kernel(CopyTable table) {
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
  nabla::cuda::DeviceGuard guard(device);
  const auto stream = static_cast<cudaStream_t>(nabla::cuda::current_stream(device).handle());
  for (size_t begin = 0; begin < copies.size(); begin += kMaxCopies) {
    const size_t end = std::min(copies.size(), begin + kMaxCopies);
    CopyTable table{};
    int64_t most_units = 0;
    int count = 0;
    for (size_t i = begin; i < end; ++i) {
      const ByteCopy& c = copies[i];
      if (c.bytes == 0) continue;
      const int32_t unit = widest_unit(c.dst, c.src, c.bytes);
      const auto units = static_cast<int64_t>(c.bytes / static_cast<size_t>(unit));
      table.entries[count++] = {static_cast<char*>(c.dst), static_cast<const char*>(c.src), units, unit};
      most_units = std::max(most_units, units);
    }
    if (count == 0) continue;
    const int64_t blocks_x = std::clamp<int64_t>((most_units + kBlock - 1) / kBlock, 1, kMaxBlocksX);
    copy_many_kernel<<<dim3(static_cast<unsigned>(blocks_x), static_cast<unsigned>(count)), kBlock, 0,
                       stream>>>(table);
    NABLA_CUDA_CHECK_LAUNCH();
  }
}

}  // namespace nabla::ops::cuda
