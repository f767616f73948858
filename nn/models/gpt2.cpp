#include "nabla/nn/models/gpt2.h"

#include <cmath>
#include <string>

#include "nabla/core/autograd/grad_mode.h"
#include "nabla/core/error.h"
#include "nabla/ops/ops.h"

namespace nabla::nn::models {

Conv1D::Conv1D(int64_t in, int64_t out) {
  weight = randn({in, out}) * 0.02;
  bias = zeros({out});
  register_parameter("weight", weight);
  register_parameter("bias", bias);
}

Tensor Conv1D::forward(const Tensor& x) {
  return linear(x, weight.t(), bias);  // the (out, in) view of the (in, out) weight: no copy
}

Tensor Conv1D::forward(const Tensor& x, Activation activation) {
  return linear(x, weight.t(), bias, activation);
}

GPT2Attention::GPT2Attention(const GPT2Config& c)
    : c_attn(c.width, 3 * c.width), c_proj(c.width, c.width), heads(c.heads) {
  NABLA_CHECK(c.heads > 0 && c.width % c.heads == 0, "GPT2: width {} must be a positive multiple of heads {}",
              c.width, c.heads);
  register_modules({{"c_attn", c_attn}, {"c_proj", c_proj}});
}

Tensor GPT2Attention::forward(const Tensor& x) {
  const int64_t B = x.size(0), T = x.size(1), C = x.size(2);
  const TensorList qkv = chunk(c_attn(x), 3, -1);
  auto split_heads = [&](const Tensor& t) { return t.view({B, T, heads, C / heads}).transpose(1, 2); };
  // (B, H, T, D): fused flash attention on CUDA in bfloat16/float16, the math path otherwise.
  AttentionOptions causal;
  causal.causal = true;
  const Tensor y =
      scaled_dot_product_attention(split_heads(qkv[0]), split_heads(qkv[1]), split_heads(qkv[2]), causal);
  return c_proj(y.transpose(1, 2).reshape({B, T, C}));
}

GPT2MLP::GPT2MLP(const GPT2Config& c) : c_fc(c.width, 4 * c.width), c_proj(4 * c.width, c.width) {
  register_modules({{"c_fc", c_fc}, {"c_proj", c_proj}});
}

Tensor GPT2MLP::forward(const Tensor& x) {
  // gelu_tanh(c_fc(x)) in c_fc's product epilogue on CUDA (linear's activation option).
  return c_proj(c_fc.forward(x, Activation::gelu_tanh));
}

// Pre-norm: each LayerNorm feeds a linear, so under autocast it writes the linear's dtype directly.
const nn::LayerNormOptions kPreNorm{.autocast_output = true};

GPT2Block::GPT2Block(const GPT2Config& c)
    : ln_1({c.width}, kPreNorm), ln_2({c.width}, kPreNorm), attn(c), mlp(c) {
  register_modules({{"ln_1", ln_1}, {"attn", attn}, {"ln_2", ln_2}, {"mlp", mlp}});
}

Tensor GPT2Block::forward(const Tensor& x) {
  const Tensor h = x + attn(ln_1(x));
  return h + mlp(ln_2(h));
}

GPT2Transformer::GPT2Transformer(const GPT2Config& c)
    : wte(c.vocab, c.width), wpe(c.context, c.width), ln_f({c.width}, kPreNorm) {
  for (int64_t i = 0; i < c.layers; ++i) h.emplace_back<GPT2Block>(c);
  register_modules({{"wte", wte}, {"wpe", wpe}, {"h", h}, {"ln_f", ln_f}});
}

GPT2::GPT2(const GPT2Config& c)
    : config(c), transformer(c), lm_head({.in = c.width, .out = c.vocab, .bias = false}) {
  register_modules({{"transformer", transformer}, {"lm_head", lm_head}});
  lm_head.weight = transformer.wte.weight;  // tied: one parameter under two names
  NoGradGuard no_grad;
  for (auto& [name, p] : named_parameters()) {
    if (p.dim() < 2) continue;
    const bool residual = name.ends_with("c_proj.weight");
    p.copy_(randn(p.sizes()) * (residual ? 0.02 / std::sqrt(2.0 * static_cast<double>(c.layers)) : 0.02));
  }
}

Tensor GPT2::logits(const Tensor& tokens) {
  NABLA_CHECK(tokens.dim() == 2, "GPT2: expected (batch, time) tokens, got {} dims", tokens.dim());
  const int64_t T = tokens.size(1);
  NABLA_CHECK(T >= 1 && T <= config.context, "GPT2: {} tokens per row; the model's context holds 1 to {}", T,
              config.context);
  const Tensor positions = arange(static_cast<double>(T), {.dtype = kInt64, .device = tokens.device()});
  Tensor x = transformer.wte(tokens) + transformer.wpe(positions);  // (B, T, C)
  // The blocks' forward, chained so that each residual add runs with the LayerNorm after it
  // (add_layer_norm): a block's first add feeds its ln_2, its second the next block's ln_1, or
  // ln_f after the last block. The values are those of block->forward applied in turn.
  const size_t n = transformer.h.size();
  auto block = [&](size_t i) -> GPT2Block& { return static_cast<GPT2Block&>(transformer.h[i]); };
  if (n == 0) return lm_head(transformer.ln_f(x));
  Tensor z = block(0).ln_1(x);
  for (size_t i = 0; i < n; ++i) {
    GPT2Block& b = block(i);
    const AddNorm mid = b.ln_2.forward_add(x, b.attn(z));
    LayerNorm& next = i + 1 < n ? block(i + 1).ln_1 : transformer.ln_f;
    const AddNorm out = next.forward_add(mid.sum, b.mlp(mid.normalized));
    x = out.sum;
    z = out.normalized;
  }
  return lm_head(z);
}

Tensor GPT2::loss(const Tensor& tokens, const Tensor& targets) {
  const Tensor l = logits(tokens);
  return cross_entropy(l.view({-1, config.vocab}), targets.reshape({-1}));
}

LoadResult GPT2::load_hf_state_dict(const StateDict& dict) {
  StateDict kept;
  for (const auto& [key, t] : dict) {
    if (key.ends_with(".attn.bias") || key.ends_with(".attn.masked_bias")) continue;
    kept[key] = t;
  }
  return load_state_dict(kept, /*strict=*/true);
}

}  // namespace nabla::nn::models
