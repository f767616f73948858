// Public header. Gradient checkpointing: trade compute for activation memory.
//
//   Tensor y = nn::checkpoint([&](const Tensor& x) { return block2(block1(x)); }, x);
//   Tensor out = nn::checkpoint_sequential(model.layers, /*segments=*/4, x);
//
// The segment runs without recording (its activations are freed at once); only its inputs are
// kept. Backward runs it again with recording on, under the RNG state (dropout draws the same
// mask) and the autocast state the first run saw, then backpropagates through that re-run.
//
// In-place ops are safe anywhere in a segment, also on its input (an in-place ReLU at a segment
// edge, where PyTorch's checkpoint_sequential fails on ResNet-50): the first run works on a
// copy of each input, so the kept input is the value the segment really started from.
#pragma once

#include <functional>

#include "nabla/core/tensor.h"
#include "nabla/nn/containers.h"

namespace nabla::nn {

using SegmentFn = std::function<TensorList(const TensorList&)>;

// Runs `fn` on `inputs` as one checkpointed segment. Outputs that require grad get one backward
// node that recomputes the segment.
TensorList checkpoint(const SegmentFn& fn, const TensorList& inputs);
// One input, one output.
Tensor checkpoint(const std::function<Tensor(const Tensor&)>& fn, const Tensor& input);

// Splits the modules of `seq` into `segments` runs of about equal length and checkpoints each
// but the last (its activations are needed by backward right away, as in PyTorch).
Tensor checkpoint_sequential(const Sequential& seq, int segments, const Tensor& input);
// The same over any list of modules (ResNet uses it over its stem and blocks).
Tensor checkpoint_sequential(const std::vector<Module*>& modules, int segments, const Tensor& input);

}  // namespace nabla::nn
