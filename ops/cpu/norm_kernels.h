// Internal. CPU kernels for layer norm and RMS norm. The front end (ops/layer_norm.cpp)
// validates, picks the layout and allocates; these only compute. CPU batch norm is reached
// through its family's seam (ops/detail/batch_norm.h; defined in ops/cpu/norm.cpp).
#pragma once

#include "nabla/core/tensor.h"

namespace nabla::ops::cpu {

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
