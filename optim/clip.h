// Public header. Gradient clipping, in place on the parameters' gradients. The total norm is
// a 0-d tensor on the gradients' device and the clip coefficient is applied there too, so
// clipping never waits for the device. Parameters without a gradient are skipped.
//
//   auto norm = nb::optim::clip_grad_norm_(params, 1.0);   // log norm.item<float>() if needed
#pragma once

#include <limits>

#include "nabla/core/tensor.h"

namespace nabla::optim {

inline constexpr double kInfNorm = std::numeric_limits<double>::infinity();

// Scales all gradients by min(1, max_norm / (total_norm + 1e-6)), where total_norm is the
// norm_type-norm of all gradients together (kInfNorm: the largest magnitude). Returns
// total_norm (float32, float64 for float64 gradients, on the gradients' device; 0 when no
// parameter has a gradient).
Tensor clip_grad_norm_(const TensorList& params, double max_norm, double norm_type = 2.0);

// Clamps every gradient element to [-clip_value, clip_value].
void clip_grad_value_(const TensorList& params, double clip_value);

}  // namespace nabla::optim
