// Public header. Dropout: zeroes each element with probability p while training and scales the
// rest by 1 / (1 - p), so the expected value is unchanged.
//
//   auto y = nabla::dropout(x, {.p = 0.1, .training = is_training});
//
// The mask comes from the generator's Philox stream exactly as nabla::bernoulli draws it:
// element i of x (in row-major logical order) is kept when the i-th uniform draw is below 1 - p.
// So a seed gives the same mask on the CPU and on CUDA, whatever x's layout.
#pragma once

#include "nabla/core/generator.h"
#include "nabla/core/tensor.h"

namespace nabla {

struct DropoutOptions {
  double p = 0.5;                  // the probability of zeroing an element, in [0, 1]
  bool training = true;            // false: the identity (eval mode)
  Generator* generator = nullptr;  // nullptr: the default generator of x's device
};

// Returns x itself when !training or p == 0, and zeros (x * 0) when p == 1.
Tensor dropout(const Tensor& x, DropoutOptions options = {});

// Channel dropout (PyTorch's dropout2d): zeroes whole channels of (N, C, H, W), each with
// probability p, and scales the rest by 1 / (1 - p). One draw per (n, c), in row-major order,
// so a seed gives the same mask on the CPU and on CUDA. A 3-d input is taken as (N, C, L), one
// draw per (n, c), as PyTorch's dropout2d does (it warns that this is 1-d channel dropout).
Tensor dropout2d(const Tensor& x, DropoutOptions options = {});

}  // namespace nabla
