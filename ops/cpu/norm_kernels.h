// Internal. CPU kernels for batch norm and layer norm. The front ends (ops/norm.cpp,
// ops/layer_norm.cpp) validate, pick the layout and allocate; these only compute.
//
// Batch norm sees x (N, C, *) dense in contiguous or channels_last order, that is as `outer`
// blocks of (C, inner) elements: inner = prod(*) for contiguous x and 1 for channels_last (or
// (N, C)) x. y, dy and dx share x's strides. Per-channel tensors are (C), contiguous, in the
// parameter dtype (float32 for float16/bfloat16 x, x's dtype otherwise).
#pragma once

#include "nabla/core/tensor.h"

namespace nabla::ops::cpu {

// The inputs of one batch-norm call; weight, bias and the running stats may be undefined.
struct BatchNormInputs {
  Tensor x, weight, bias, running_mean, running_var;
};

// The per-channel results of a training forward that its backward needs: the batch mean and
// 1 / sqrt(biased var + eps).
struct BatchNormStats {
  Tensor mean, invstd;
};

// Training: normalizes with the batch statistics, writes them to `stats`, and updates the
// running stats (if defined) in place with the unbiased variance. Needs N * prod(*) > 1.
void batch_norm_forward(const BatchNormInputs& in, const Tensor& y, const BatchNormStats& stats,
                        double momentum, double eps);
// Eval: normalizes with the running stats.
void batch_norm_inference(const BatchNormInputs& in, const Tensor& y, double eps);
// Training-mode backward. dx, dweight and dbias may each be undefined (not needed).
void batch_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const BatchNormStats& stats,
                         const Tensor& dx, const Tensor& dweight, const Tensor& dbias);

// Which row normalization: layer norm centres each row on its mean; RMS norm does not (its row
// mean is taken as 0, so xhat = x * rstd and the backward drops the mean(g) term).
enum class RowNorm : uint8_t { Layer, Rms };

// Layer norm and RMS norm over rows: x, y, dy and dx are contiguous (rows, D); weight and bias are
// (D) in x's dtype or undefined; mean and rstd are (rows) in the parameter dtype (RMS norm writes 0
// means, which the backward reads like layer norm's).
void layer_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps,
                        const Tensor& y, const Tensor& mean, const Tensor& rstd,
                        RowNorm kind = RowNorm::Layer);
void layer_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& mean,
                         const Tensor& rstd, const Tensor& dx, const Tensor& dweight, const Tensor& dbias,
                         RowNorm kind = RowNorm::Layer);

}  // namespace nabla::ops::cpu
