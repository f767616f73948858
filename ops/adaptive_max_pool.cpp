// adaptive_max_pool2d (ops/pool.h): per output column, then per output row, the maximum over the
// window's slice of the input, from max along one dim; the windows as adaptive_avg_pool2d's.
#include "nabla/ops/detail/dispatch.h"
#include "nabla/ops/indexing.h"
#include "nabla/ops/pool.h"
#include "nabla/ops/reduce.h"

namespace nabla {

namespace {

// Max over the windows [floor(o * in / out), ceil((o + 1) * in / out)) of `dim`, o < out.
Tensor pool_axis(const Tensor& x, int64_t dim, int64_t out) {
  const int64_t in = x.size(dim);
  TensorList parts;
  parts.reserve(static_cast<size_t>(out));
  for (int64_t o = 0; o < out; ++o) {
    const int64_t start = o * in / out, end = ((o + 1) * in + out - 1) / out;
    parts.push_back(max(x.narrow(dim, start, end - start), dim, /*keepdim=*/true).first);
  }
  return out == 1 ? parts[0] : cat(parts, dim);
}

}  // namespace

Tensor adaptive_max_pool2d(const Tensor& x, PoolPair output_size) {
  ops::check_defined("adaptive_max_pool2d", x, "input");
  NABLA_CHECK(x.dim() == 3 || x.dim() == 4,
              "adaptive_max_pool2d: expected an input (N, C, H, W) or (C, H, W), got {}", describe(x));
  NABLA_CHECK(output_size.h > 0 && output_size.w > 0,
              "adaptive_max_pool2d: expected a positive output size, got ({}, {})", output_size.h,
              output_size.w);
  NABLA_CHECK(x.size(x.dim() - 2) > 0 && x.size(x.dim() - 1) > 0,
              "adaptive_max_pool2d: the input {} has no pixels to pool", describe(x));
  const MemoryFormat format = x.suggest_memory_format();
  const int64_t h = x.dim() - 2, w = x.dim() - 1;
  const Tensor y = pool_axis(pool_axis(x, w, output_size.w), h, output_size.h);
  return y.dim() == 4 ? y.contiguous(format) : y;
}

}  // namespace nabla
