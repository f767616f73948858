// Public header. 2-d pooling over (N, C, H, W) or (C, H, W) inputs, as in PyTorch.
//
//   auto y = nabla::max_pool2d(x, {.kernel = 3, .stride = 2, .padding = 1});
//   auto [y, indices] = nabla::max_pool2d_with_indices(x, {.kernel = 2});
//   auto z = nabla::avg_pool2d(x, {.kernel = {3, 2}, .ceil_mode = true, .count_include_pad = false});
//   auto g = nabla::adaptive_avg_pool2d(x, {1, 1});  // global average pooling
//
// Output sizes follow PyTorch: floor((H + 2 * padding - dilation * (kernel - 1) - 1) / stride) + 1,
// or ceil with ceil_mode (a last window that would start in the right padding is dropped).
// A channels_last input gives a channels_last output. Float16/bfloat16 compute in float32.
#pragma once

#include <cstdint>
#include <utility>

#include "nabla/core/tensor.h"

namespace nabla {

// A (height, width) pair that a single value fills: {.kernel = 3} or {.kernel = {3, 2}}.
struct PoolPair {
  int64_t h = 0;
  int64_t w = 0;
  PoolPair() = default;
  PoolPair(int64_t both) : h(both), w(both) {}  // NOLINT(google-explicit-constructor): {.kernel = 3}
  PoolPair(int64_t height, int64_t width) : h(height), w(width) {}
};

struct MaxPool2dOptions {
  PoolPair kernel;
  PoolPair stride = 0;  // 0 means the kernel size (PyTorch's stride=None)
  PoolPair padding = 0;
  PoolPair dilation = 1;
  bool ceil_mode = false;
};

struct AvgPool2dOptions {
  PoolPair kernel;
  PoolPair stride = 0;  // 0 means the kernel size
  PoolPair padding = 0;
  bool ceil_mode = false;
  bool count_include_pad = true;  // divide by the window size including padding
};

Tensor max_pool2d(const Tensor& x, const MaxPool2dOptions& options);
// The output and, for each output element, the position h * W + w of its max within its
// (H, W) input plane (int64, the output's shape and layout).
std::pair<Tensor, Tensor> max_pool2d_with_indices(const Tensor& x, const MaxPool2dOptions& options);
Tensor avg_pool2d(const Tensor& x, const AvgPool2dOptions& options);
// Averages over output_size.h x output_size.w windows from floor(o * H / OH) to
// ceil((o + 1) * H / OH), which cover the input for any sizes (as PyTorch).
Tensor adaptive_avg_pool2d(const Tensor& x, PoolPair output_size);
// The maximum over the same windows as adaptive_avg_pool2d (PyTorch's adaptive_max_pool2d,
// without its indices). A window's maximum is taken over its columns, then over its rows (one
// max reduction per output column and row), so its gradient goes to the first maximum in
// row-major order, as PyTorch's does. For (N, C, H, W) and unbatched (C, H, W).
Tensor adaptive_max_pool2d(const Tensor& x, PoolPair output_size);

}  // namespace nabla
