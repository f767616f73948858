// Public header. Drawing category indices from probabilities, as torch.multinomial.
//
//   auto next = nabla::multinomial(nabla::softmax(logits / temperature, -1), 1);   // (B, V) -> (B, 1)
//
// probs is (C) or (N, C), non-negative and not all zero in a row; it need not sum to 1. The
// result is int64, (num_samples) or (N, num_samples). Without replacement every index is drawn
// at most once per row (num_samples <= C), with the distribution of drawing one at a time and
// renormalizing; with replacement each draw is independent. Draws use the Gumbel-max trick
// (argmax / top-k of log p - log(-log u)), so a zero-probability category is never drawn and no
// draw waits for the device. Bad rows (negative, NaN, all zero) are an error on the CPU; on CUDA
// checking them would wait for the device, so their draws are unspecified there.
#pragma once

#include <cstdint>

#include "nabla/core/generator.h"
#include "nabla/core/tensor.h"

namespace nabla {

struct MultinomialOptions {
  bool replacement = false;
  Generator* generator = nullptr;  // nullptr: the default generator of probs' device
};

Tensor multinomial(const Tensor& probs, int64_t num_samples, MultinomialOptions options = {});

}  // namespace nabla
