// Internal. CUDA kernels of the negative log-likelihood pick that cross_entropy and nll_loss
// share, in plain C++ so the front end compiles without nvcc. Same contracts as
// ops/cpu/loss_kernels.h, except that target values are not checked on the host (that would
// wait for the device): a target outside [0, C) that is not ignore_index gives a NaN loss and
// no gradient, and nothing is read out of bounds.
#pragma once

#include "nabla/core/tensor.h"

namespace nabla::ops::cuda {

void nll_forward(const Tensor& logp, const Tensor& target, int64_t ignore_index, const Tensor& out);
void nll_backward(const Tensor& grad, const Tensor& target, int64_t ignore_index, const Tensor& grad_logp);

// Fused cross-entropy over rows, for cross_entropy on (N, C) logits: one pass per row reads the
// logits in their own dtype and computes in the compute type, so no float32 copy of a 16-bit
// (N, C) tensor and no log-probabilities are kept. logits (N, C) contiguous; target (N) int64;
// loss and lse (N) in the compute dtype (float32 for 16-bit logits). loss[n] is
// (1 - e) * (lse - x[t]) + e * (lse - mean_c x[c]) with e the label smoothing, and 0 where
// target == ignore_index.
// A target outside [0, C) gives a NaN loss and no gradient, as nll_forward.
void cross_entropy_forward(const Tensor& logits, const Tensor& target, int64_t ignore_index,
                           double label_smoothing, const Tensor& loss, const Tensor& lse);
void cross_entropy_backward(const Tensor& grad, const Tensor& logits, const Tensor& target, const Tensor& lse,
                            int64_t ignore_index, double label_smoothing, const Tensor& grad_logits);

}  // namespace nabla::ops::cuda
