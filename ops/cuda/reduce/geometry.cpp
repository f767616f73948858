// The reductions' launch planner (reduce/geometry.h), shared by the eager kernels and the step
// compiler's generated ones: the same block, grid and splits for the same block of elements, so
// that both add in the same order.
#include "nabla/ops/cuda/reduce/geometry.h"

#include <algorithm>

#include "nabla/core/error.h"

namespace nabla::ops::cuda::reduction {

LaunchShape plan_launch(int64_t a, int64_t o, int64_t b, int64_t i, int64_t sms, int vector) {
  LaunchShape s{};
  Geometry& g = s.g;
  g = {.a = a, .o = o, .b = b, .i = i, .reduce = a * b, .outputs = o * i, .chunk = 0, .splits = 1};
  s.rows = i == 1;
  int64_t blocks = 0;
  if (s.rows) {
    if (g.reduce <= 1024 || g.outputs >= sms * 32) {
      // A warp, or a sub-warp for short rows (counted in 16-byte loads when contiguous).
      s.block_x = pow2_at_least(a == 1 ? ceil_div(g.reduce, vector) : g.reduce, 32);
      s.block_y = 256 / s.block_x;
    } else {
      s.block_x = g.reduce >= 4096 ? 512 : 256;  // a block per long row
      s.block_y = 1;
      const int64_t want = ceil_div(sms * 4, g.outputs);  // about 4 blocks per SM
      g.splits = std::clamp<int64_t>(std::min(want, ceil_div(g.reduce, int64_t{s.block_x} * 16)), 1, 65535);
    }
    blocks = ceil_div(g.outputs, s.block_y);
  } else {
    s.block_x = pow2_at_least(i, 32);
    s.block_y = std::max(pow2_at_least(g.reduce, 256 / s.block_x), 32 / s.block_x);
    blocks = o * ceil_div(i, s.block_x);
    const int64_t target = sms * 2048 / (int64_t{s.block_x} * s.block_y);  // enough blocks to fill every SM
    if (blocks < target) {
      const int64_t want = ceil_div(target, blocks);
      g.splits = std::clamp<int64_t>(std::min(want, ceil_div(g.reduce, int64_t{s.block_y} * 16)), 1, 65535);
    }
  }
  NABLA_ASSERT(!(s.rows && a == 1 && g.splits > 1 && rows_never_split(g.reduce, g.outputs, sms)),
               "reduction launch: rows of {} split in {} although rows_never_split says they do not",
               g.reduce, g.splits);
  g.chunk = ceil_div(g.reduce, g.splits);
  g.splits = ceil_div(g.reduce, g.chunk);
  NABLA_ASSERT(blocks < (int64_t{1} << 31), "reduction grid of {} blocks", blocks);
  s.grid_x = static_cast<unsigned>(blocks);
  s.grid_y = static_cast<unsigned>(g.splits);
  return s;
}

}  // namespace nabla::ops::cuda::reduction
