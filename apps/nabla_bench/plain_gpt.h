// `nabla-bench gpt --plain`: GPT-2 as the user guide's "Writing a transformer" writes it, with
// plain layers only (LayerNorm, Linear, gelu, scaled_dot_product_attention, residual adds), none
// of nn::models::GPT2's hand-fused calls (forward_add, autocast_output, the GELU epilogue). It
// measures what the framework, and its step compiler, do for a transformer nobody hand-fused.
#pragma once

#include <memory>

#include "nabla/nn/models/gpt2.h"
#include "nabla/nn/module.h"

namespace nabla::bench {

class PlainGpt : public nn::Module {
 public:
  virtual Tensor loss(const Tensor& tokens, const Tensor& targets) = 0;
};

// nanoGPT's GPT-2 (pre-norm blocks, tied embeddings, tanh GELU) in the shape of `config`.
std::shared_ptr<PlainGpt> plain_gpt(const nn::models::GPT2Config& config);

}  // namespace nabla::bench
