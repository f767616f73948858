// Public header. Padding, as torch.nn.functional.pad.
//
//   auto y = nabla::pad(x, {1, 1, 2, 2});                                    // W by 1 each side, H by 2
//   auto r = nabla::pad(img, {3, 3, 3, 3}, {.mode = nabla::PadMode::Reflect}); // (N, C, H, W)
//
// `pads` names the last dims first, a (before, after) pair each: {left, right, top, bottom, ...}.
// Constant padding may be negative (it crops). Reflect mirrors without repeating the edge (pads
// below the dim's size), replicate repeats the edge, circular wraps around (pads up to the size).
// Differentiable; built from narrow and cat, so no index tensor and no host synchronization.
#pragma once

#include <cstdint>
#include <vector>

#include "nabla/core/tensor.h"

namespace nabla {

enum class PadMode { Constant, Reflect, Replicate, Circular };

struct PadOptions {
  PadMode mode = PadMode::Constant;
  double value = 0.0;  // the fill of constant padding
};

Tensor pad(const Tensor& x, const std::vector<int64_t>& pads, PadOptions options = {});

}  // namespace nabla
