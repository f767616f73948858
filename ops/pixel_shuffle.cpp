// pixel_shuffle / pixel_unshuffle as reshape -> permute -> reshape (ops/pixel_shuffle.h).
#include "nabla/ops/pixel_shuffle.h"

#include "nabla/ops/detail/dispatch.h"
#include "nabla/ops/view.h"

namespace nabla {

namespace {

// x's leading (batch) dims, before its last three.
Shape batch_dims(const Tensor& x) {
  return Shape(x.sizes().begin(), x.sizes().end() - 3);
}

// The permutation that keeps the batch dims and reorders the last `tail` as `order`.
Shape permutation(int64_t batch, std::initializer_list<int64_t> order) {
  Shape dims;
  for (int64_t d = 0; d < batch; ++d) dims.push_back(d);
  for (int64_t d : order) dims.push_back(batch + d);
  return dims;
}

}  // namespace

Tensor pixel_shuffle(const Tensor& x, int64_t r) {
  ops::check_defined("pixel_shuffle", x, "input");
  NABLA_CHECK(x.dim() >= 3, "pixel_shuffle: expected an input (*, C * r^2, H, W), got {}", describe(x));
  NABLA_CHECK(r > 0, "pixel_shuffle: expected upscale_factor > 0, got {}", r);
  const int64_t c = x.size(x.dim() - 3), h = x.size(x.dim() - 2), w = x.size(x.dim() - 1);
  NABLA_CHECK(c % (r * r) == 0,
              "pixel_shuffle: the input's channels ({}) must be divisible by upscale_factor^2 ({}), got {}",
              c, r * r, describe(x));
  const Shape batch = batch_dims(x);
  const auto n = static_cast<int64_t>(batch.size());
  Shape split = batch, out = batch;
  split.insert(split.end(), {c / (r * r), r, r, h, w});  // (*, C, i, j, H, W)
  out.insert(out.end(), {c / (r * r), h * r, w * r});
  // (*, C, i, j, H, W) -> (*, C, H, i, W, j); a 4-d result keeps x's layout, as PyTorch's.
  const Tensor y = reshape(permute(reshape(x, split), permutation(n, {0, 3, 1, 4, 2})), out);
  return y.dim() == 4 ? y.contiguous(x.suggest_memory_format()) : y;
}

Tensor pixel_unshuffle(const Tensor& x, int64_t r) {
  ops::check_defined("pixel_unshuffle", x, "input");
  NABLA_CHECK(x.dim() >= 3, "pixel_unshuffle: expected an input (*, C, H * r, W * r), got {}", describe(x));
  NABLA_CHECK(r > 0, "pixel_unshuffle: expected downscale_factor > 0, got {}", r);
  const int64_t c = x.size(x.dim() - 3), h = x.size(x.dim() - 2), w = x.size(x.dim() - 1);
  NABLA_CHECK(h % r == 0 && w % r == 0,
              "pixel_unshuffle: the input's height and width ({} x {}) must be divisible by downscale_factor "
              "({}), got {}",
              h, w, r, describe(x));
  const Shape batch = batch_dims(x);
  const auto n = static_cast<int64_t>(batch.size());
  Shape split = batch, out = batch;
  split.insert(split.end(), {c, h / r, r, w / r, r});  // (*, C, H, i, W, j)
  out.insert(out.end(), {c * r * r, h / r, w / r});
  // (*, C, H, i, W, j) -> (*, C, i, j, H, W); a 4-d result keeps x's layout, as PyTorch's.
  const Tensor y = reshape(permute(reshape(x, split), permutation(n, {0, 2, 4, 1, 3})), out);
  return y.dim() == 4 ? y.contiguous(x.suggest_memory_format()) : y;
}

}  // namespace nabla
