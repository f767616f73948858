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

}  // namespace nabla::ops::cuda
