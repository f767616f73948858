// Public header. Embedding lookup: rows of a weight table picked by integer indices.
//
//   auto w = nabla::randn({vocab, dim}, {.requires_grad = true});
//   auto e = nabla::embedding(w, tokens);                       // tokens (B, T) int64 -> (B, T, dim)
//   auto p = nabla::embedding(w, tokens, {.padding_idx = 0});   // row 0 gets no gradient
//
// An index outside [0, V) is an error naming it (on CUDA the check reads the indices' min and
// max back to the host: one wait for the device per forward call).
#pragma once

#include <cstdint>

#include "nabla/core/tensor.h"

namespace nabla {

struct EmbeddingOptions {
  int64_t padding_idx = -1;  // a row in [0, V) whose gradient stays zero; -1 for none
};

// weight (V, D), indices int64 of any shape (...) -> (..., D).
Tensor embedding(const Tensor& weight, const Tensor& indices, const EmbeddingOptions& options = {});

}  // namespace nabla
