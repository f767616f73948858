// Public header. Loss functions, as in PyTorch's torch.nn.functional.
//
//   auto loss = nabla::cross_entropy(logits, labels);                      // (N, C), (N) int64
//   auto tok = nabla::cross_entropy(logits, labels, {.label_smoothing = 0.1, .ignore_index = 0});
//   auto l2 = nabla::mse_loss(pred, y, {.reduction = nabla::Reduction::Sum});
//   auto bce = nabla::binary_cross_entropy_with_logits(scores, labels01, {.pos_weight = w});
//
// Class-index losses take logits/log-probabilities (N, C) or (N, C, d1, ...) with int64 targets
// (N) or (N, d1, ...). Targets equal to ignore_index contribute nothing and are left out of the
// mean's denominator (a batch with every target ignored gives NaN, as in PyTorch). On CUDA these
// losses never wait for the device, so target values are not checked there: an out-of-range
// target gives a NaN loss (on the CPU it is an error). Float16/bfloat16 losses are reduced in
// float32 and returned in the input dtype.
#pragma once

#include <cstdint>

#include "nabla/core/tensor.h"

namespace nabla {

enum class Reduction : uint8_t { None, Mean, Sum };

struct CrossEntropyOptions {
  // loss = (1 - e) * nll + e * mean over classes of -log p (PyTorch's definition).
  double label_smoothing = 0.0;
  int64_t ignore_index = -100;
  Reduction reduction = Reduction::Mean;
};

struct NllLossOptions {
  int64_t ignore_index = -100;
  Reduction reduction = Reduction::Mean;
};

struct MseLossOptions {
  Reduction reduction = Reduction::Mean;
};

struct BceWithLogitsOptions {
  Tensor pos_weight = {};  // optional; broadcasts against the logits (usually (C), one per class)
  Reduction reduction = Reduction::Mean;
};

// -log_softmax(logits, 1) at each target, computed stably from the logits.
Tensor cross_entropy(const Tensor& logits, const Tensor& target, const CrossEntropyOptions& options = {});
// -logp at each target; logp holds log-probabilities (e.g. from log_softmax over dim 1).
Tensor nll_loss(const Tensor& logp, const Tensor& target, const NllLossOptions& options = {});
// (input - target)^2; input and target have one shape.
Tensor mse_loss(const Tensor& input, const Tensor& target, const MseLossOptions& options = {});
// -[pos_weight * t * log(sigmoid(x)) + (1 - t) * log(1 - sigmoid(x))], computed in the stable
// form max(x, 0) - x * t + log(1 + exp(-|x|)) (with pos_weight, (1 - t) * x + (1 + (pos_weight - 1)
// * t) * softplus(-x)). logits and target have one shape; target holds probabilities in [0, 1].
Tensor binary_cross_entropy_with_logits(const Tensor& logits, const Tensor& target,
                                        const BceWithLogitsOptions& options = {});

}  // namespace nabla
