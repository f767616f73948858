// Public header (for custom autograd code). The check a saved tensor passes when a backward
// unpacks it: SavedTensor runs it, and so does code that keeps a value for backward another way
// (the step compiler's recomputed values, ops/fusion/recompute.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "nabla/core/tensor.h"

namespace nabla::autograd {

// Throws, naming the node and the saved tensor's index, when t was written in place since it was
// saved at version saved_version.
void check_saved_version(const std::string& node_name, size_t index, const Tensor& t, uint32_t saved_version);

}  // namespace nabla::autograd
