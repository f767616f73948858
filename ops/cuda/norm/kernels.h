// Internal. CUDA entry points for layer norm, RMS norm and group norm, in plain C++ so front
// ends compile without nvcc. Same tensor contracts as ops/cpu/norm_kernels.h. Everything runs on
// the current stream of x's device and never synchronizes. Batch norm is a family of its own
// (ops/cuda/batch_norm/kernels.h).
#pragma once

#include "nabla/core/tensor.h"
#include "nabla/ops/cpu/norm_kernels.h"

namespace nabla::ops::cuda {

using RowNorm = cpu::RowNorm;
// y (forward) and dy (backward) have x's dtype, or are float16/bfloat16 beside a float32 x (the
// lower-precision output option of layer_norm). add_layer_norm's residual: the forward normalizes
// x + residual and writes that sum (x's dtype) too; its backward (x the saved sum) adds dsum, the
// gradient that reached the sum directly, into dx and writes the total again to dresidual (of the
// residual's dtype). residual and dresidual have x's dtype or are 16-bit beside float32. These
// mixed calls run only on the vectorized kernels (D a multiple of 16 bytes, rows 16-byte aligned,
// not too long): where those do not apply the functions return false and write nothing, and the
// caller composes or converts. Same-dtype calls without a residual always run and return true.
bool layer_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps,
                        const Tensor& y, const Tensor& mean, const Tensor& rstd,
                        RowNorm kind = RowNorm::Layer, const Tensor& residual = {}, const Tensor& sum = {});
bool layer_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& mean,
                         const Tensor& rstd, const Tensor& dx, const Tensor& dweight, const Tensor& dbias,
                         RowNorm kind = RowNorm::Layer, const Tensor& dsum = {},
                         const Tensor& dresidual = {});

// Group normalization (Note [Group norm] in norm/group_norm.cu): x (N, C, *) contiguous, or 4-d
// channels_last; y laid out as x. weight, bias (C) or undefined, mean and rstd (N, groups), all of
// the statistics' dtype (float64 for float64 x, float32 otherwise).
void group_norm_forward(const Tensor& x, int64_t groups, const Tensor& weight, const Tensor& bias, double eps,
                        const Tensor& y, const Tensor& mean, const Tensor& rstd);
// dx (laid out as x; undefined: not computed), and per (sample, channel) the shares of dweight
// and dbias, (N, C) of the statistics' dtype (their sums over N are the gradients).
void group_norm_backward(const Tensor& dy, const Tensor& x, int64_t groups, const Tensor& weight,
                         const Tensor& mean, const Tensor& rstd, const Tensor& dx, const Tensor& dweight_part,
                         const Tensor& dbias_part);

}  // namespace nabla::ops::cuda
