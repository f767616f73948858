// Public header. Resizing (N, C, H, W) images and feature maps, as PyTorch's
// torch.nn.functional.interpolate defines it for 4-d inputs:
//
//   auto up = nabla::interpolate(x, {.scale_factor = 2.0, .mode = nabla::Interpolation::bilinear});
//   auto to = nabla::interpolate(x, {.size = {{64, 48}}, .mode = nabla::Interpolation::nearest});
//
// Nearest takes source pixel floor(dst * scale); bilinear and bicubic (cubic convolution,
// A = -0.75, edge pixels repeated) weigh the neighbours of (dst + 0.5) * scale - 0.5, or of
// dst * (in - 1) / (out - 1) with align_corners. scale is 1 / scale_factor when one is given,
// else in / out, as PyTorch's default (recompute_scale_factor off). The result keeps x's layout.
// Each axis is resampled in turn by index_select and per-pixel weights (float32 for 16-bit x,
// rounded once), so it differentiates through those ops and runs on every device. The indices
// and weights are built on the host for each call, so a call inside a CUDA-graph capture is
// refused by the capture (a host-to-device copy), not run wrong.
#pragma once

#include <array>
#include <optional>

#include "nabla/core/tensor.h"

namespace nabla {

enum class Interpolation { nearest, bilinear, bicubic };

struct InterpolateOptions {
  std::optional<std::array<int64_t, 2>> size;  // (Ho, Wo); exactly one of size and scale_factor
  std::optional<double> scale_factor;          // both axes, > 0
  Interpolation mode = Interpolation::nearest;
  bool align_corners = false;  // bilinear and bicubic only, as PyTorch
};
Tensor interpolate(const Tensor& x, const InterpolateOptions& options);

}  // namespace nabla
