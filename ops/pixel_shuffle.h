// Public header. Pixel shuffle (sub-pixel convolution's upsampling) and its inverse, as PyTorch
// defines them:
//
//   auto up = nabla::pixel_shuffle(x, 2);      // (N, C * 4, H, W) -> (N, C, 2 H, 2 W)
//   auto down = nabla::pixel_unshuffle(up, 2);  // and back
//
// Output channel c at (h * r + i, w * r + j) is input channel c * r^2 + i * r + j at (h, w). Any
// leading batch dims (*) are kept. They are reshapes and a permutation, so they differentiate
// through those ops and run on any device.
#pragma once

#include <cstdint>

#include "nabla/core/tensor.h"

namespace nabla {

// (*, C * r^2, H, W) -> (*, C, H * r, W * r); upscale_factor r > 0.
Tensor pixel_shuffle(const Tensor& x, int64_t upscale_factor);
// (*, C, H * r, W * r) -> (*, C * r^2, H, W); downscale_factor r > 0.
Tensor pixel_unshuffle(const Tensor& x, int64_t downscale_factor);

}  // namespace nabla
