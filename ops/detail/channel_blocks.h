// Internal (the CPU and CUDA batch-norm kernels). How both backends read a batch-norm input in
// place, without transposing it: as `outer` blocks of (C, inner), inner = prod(*) for a
// contiguous (N, C, *) tensor and 1 for channels_last, where every row of C channels is a block.
#pragma once

#include <cstdint>

#include "nabla/core/error.h"
#include "nabla/core/tensor.h"

namespace nabla::ops {

struct ChannelBlocks {
  int64_t outer = 0, channels = 0, inner = 0;
  int64_t per_channel() const { return outer * inner; }
  int64_t offset(int64_t o, int64_t c) const { return (o * channels + c) * inner; }
};

// x must be dense: contiguous or channels_last (the front end sees to it).
inline ChannelBlocks blocks_of(const Tensor& x) {
  const int64_t n = x.size(0), c = x.size(1);
  const int64_t spatial = n * c == 0 ? 0 : x.numel() / (n * c);
  if (x.is_contiguous()) return {n, c, spatial};
  NABLA_ASSERT(x.is_contiguous(MemoryFormat::ChannelsLast), "batch_norm kernel got {}", describe(x));
  return {n * spatial, c, 1};
}

}  // namespace nabla::ops
