// Internal. CPU kernels of the negative log-likelihood pick that cross_entropy and nll_loss
// share. The front end (ops/loss.cpp) validates shapes and allocates; these only compute.
#pragma once

#include <optional>

#include "nabla/core/tensor.h"

namespace nabla::ops::cpu {

// out (N, S) = -logp[n, target[n, s], s], or 0 where target == ignore_index. logp (N, C, S) and
// target (N, S, int64) are contiguous. Returns the first target outside [0, C) that is not
// ignore_index, if any (out is then unspecified).
std::optional<int64_t> nll_forward(const Tensor& logp, const Tensor& target, int64_t ignore_index,
                                   const Tensor& out);
// grad_logp (N, C, S) = -grad[n, s] where c == target[n, s] (and not ignored), else 0. Every
// element is written.
void nll_backward(const Tensor& grad, const Tensor& target, int64_t ignore_index, const Tensor& grad_logp);

// Fused cross-entropy over rows, for cross_entropy on (N, C) logits: one pass per row reads the
// logits in their own dtype and computes in the compute type, so no float32 copy of a 16-bit
// (N, C) tensor and no log-probabilities are kept. logits (N, C) contiguous; target (N) int64;
// loss and lse (N) in the compute dtype (float32 for 16-bit logits). loss[n] is
// (1 - e) * (lse - x[t]) + e * (lse - mean_c x[c]) with e the label smoothing, and 0 where
// target == ignore_index.
// Returns the first target outside [0, C) that is not ignore_index, if any.
std::optional<int64_t> cross_entropy_forward(const Tensor& logits, const Tensor& target, int64_t ignore_index,
                                             double label_smoothing, const Tensor& loss, const Tensor& lse);
// grad_logits (N, C) in the logits' dtype = grad[n] * (softmax - (1 - e) * onehot(t) - e / C), 0 on
// ignored rows; grad (N) in the compute dtype.
void cross_entropy_backward(const Tensor& grad, const Tensor& logits, const Tensor& target, const Tensor& lse,
                            int64_t ignore_index, double label_smoothing, const Tensor& grad_logits);

}  // namespace nabla::ops::cpu
