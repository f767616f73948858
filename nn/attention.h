// Public header. Multi-head attention, as torch.nn.MultiheadAttention, with the same parameter
// names and layouts (in_proj_weight (3E, E), in_proj_bias (3E), out_proj.weight (E, E),
// out_proj.bias (E)), so its state dicts move to and from PyTorch unchanged.
//
//   nn::MultiheadAttention attn({.embed_dim = 768, .num_heads = 12, .batch_first = true});
//   auto y = attn(x);                                         // self-attention, (N, L, E)
//   auto z = attn.forward(q, k, v, {.key_padding_mask = pad, .causal = true});
//
// Masks follow torch.nn.MultiheadAttention, not scaled_dot_product_attention: in a boolean
// attn_mask or key_padding_mask, true HIDES a position; a floating mask is added to the scores.
// attn_mask is (L, S) or (N * num_heads, L, S); key_padding_mask is (N, S). The heads run through
// nabla::scaled_dot_product_attention, so on CUDA in float16/bfloat16 they are fused.
#pragma once

#include <cstdint>
#include <optional>

#include "nabla/nn/layers.h"
#include "nabla/nn/module.h"

namespace nabla::nn {

struct MultiheadAttentionOptions {
  int64_t embed_dim = 0;
  int64_t num_heads = 1;     // must divide embed_dim
  double dropout = 0.0;      // on the attention weights, in training mode
  bool bias = true;          // in_proj_bias and out_proj.bias
  bool batch_first = false;  // (N, L, E) instead of PyTorch's default (L, N, E)
  TensorOptions tensor_options = {};
};

struct AttentionMasks {
  Tensor attn_mask;         // bool (true = hidden) or additive; (L, S) or (N * num_heads, L, S)
  Tensor key_padding_mask;  // bool (true = padding, hidden) or additive; (N, S)
  bool causal = false;      // query i sees keys 0..i
};

class MultiheadAttention : public Module {
 public:
  explicit MultiheadAttention(const MultiheadAttentionOptions& options);
  // Self-attention: forward(x, x, x).
  Tensor forward(const Tensor& x) override;
  Tensor forward(const Tensor& query, const Tensor& key, const Tensor& value,
                 const AttentionMasks& masks = {});

  Tensor in_proj_weight, in_proj_bias;  // (3E, E), (3E): the query, key and value projections stacked
  Linear out_proj;                      // (E, E)

 private:
  MultiheadAttentionOptions options_;
};

struct RMSNormOptions {
  std::optional<double> eps;       // default: float32's machine epsilon (float64's for float64 input)
  bool elementwise_affine = true;  // a learnable weight, starting at 1
  TensorOptions tensor_options = {};
};
// torch.nn.RMSNorm over the trailing dims normalized_shape: x / sqrt(mean(x^2) + eps) * weight.
class RMSNorm : public Module {
 public:
  explicit RMSNorm(Shape normalized_shape, const RMSNormOptions& options = {});
  Tensor forward(const Tensor& x) override;
  Tensor weight;

 private:
  Shape normalized_shape_;
  RMSNormOptions options_;
};

}  // namespace nabla::nn
