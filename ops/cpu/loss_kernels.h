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

}  // namespace nabla::ops::cpu
