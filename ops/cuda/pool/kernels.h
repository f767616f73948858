// Internal. CUDA kernels for 2-d max, average and adaptive average pooling, in plain C++ so the
// front end compiles without nvcc. Same contracts as ops/cpu/pool_kernels.h: every tensor is 4-d
// and dense in one memory format (NCHW or NHWC), read in place; kernels run on the current
// stream of the input's device and never synchronize.
#pragma once

#include "nabla/core/tensor.h"
#include "nabla/ops/detail/pool_window.h"

namespace nabla::ops::cuda {

// out (N, C, OH, OW) = the max of each window of x; indices (out's shape) = where that max is:
// int64 indices get its position h * W + w in its (H, W) plane, uint8 indices its offset in its
// window (Note [Compact max-pool indices]). Ties give the first; the first NaN wins.
void max_pool2d(const Tensor& x, const PoolGeometry& g, const Tensor& out, const Tensor& indices);
// grad_input (N, C, H, W) = the sum of grad over the outputs whose index points at each element
// (indices in either format).
void max_pool2d_backward(const Tensor& grad, const Tensor& indices, const PoolGeometry& g,
                         const Tensor& grad_input);
// positions (int64) = the plane positions of the window offsets `offsets` (uint8, same shape), -1
// for a window with no tap inside the input.
void max_pool2d_positions(const Tensor& offsets, const PoolGeometry& g, const Tensor& positions);
// Avg and AdaptiveAvg: out = the mean of each window (see avg_divisor in pool_window.h).
void avg_pool2d(const Tensor& x, const PoolGeometry& g, const Tensor& out);
// grad_input = the sum over covering windows of grad / divisor.
void avg_pool2d_backward(const Tensor& grad, const PoolGeometry& g, const Tensor& grad_input);

}  // namespace nabla::ops::cuda
