// GPT-2 (nanoGPT's model) written with nabla's public API only: learned token and position
// embeddings, pre-norm blocks of causal self-attention and a GELU(tanh) MLP, a final LayerNorm and
// an output layer tied to the token embedding.
//
// Parameter names and layouts are Hugging Face's GPT2LMHeadModel's, so its checkpoints load
// unchanged (with Config{.vocab = 50257}: the default 50304 is nanoGPT's padded vocabulary):
// transformer.wte/wpe, transformer.h.{i}.ln_1/attn.c_attn/attn.c_proj/ln_2/mlp.c_fc/ mlp.c_proj,
// transformer.ln_f, and lm_head.weight tied to transformer.wte.weight. The attention and MLP projections are
// GPT-2's Conv1D: weights stored (in, out), so c_attn.weight is (C, 3C).
#pragma once

#include <nabla/nabla.h>

#include <cmath>
#include <string>
#include <vector>

namespace gpt {

namespace nb = nabla;

struct Config {
  int64_t vocab = 50304;
  int64_t context = 1024;
  int64_t layers = 12;
  int64_t heads = 12;
  int64_t width = 768;
};

// GPT-2's Conv1D: y = x W + b with W stored (in, out). (*, in) -> (*, out).
struct Conv1D : nb::nn::Module {
  nb::Tensor weight, bias;
  Conv1D(int64_t in, int64_t out) {
    weight = nb::randn({in, out}) * 0.02;
    bias = nb::zeros({out});
    register_parameter("weight", weight);
    register_parameter("bias", bias);
  }
  nb::Tensor forward(const nb::Tensor& x) override { return nb::linear(x, weight.t(), bias); }
};

struct Attention : nb::nn::Module {
  Conv1D c_attn, c_proj;
  int64_t heads;
  Attention(const Config& c) : c_attn(c.width, 3 * c.width), c_proj(c.width, c.width), heads(c.heads) {
    register_modules({{"c_attn", c_attn}, {"c_proj", c_proj}});
  }
  nb::Tensor forward(const nb::Tensor& x) override {  // (B, T, C)
    const int64_t B = x.size(0), T = x.size(1), C = x.size(2);
    const nb::TensorList qkv = nb::chunk(c_attn(x), 3, -1);
    auto split_heads = [&](const nb::Tensor& t) { return t.view({B, T, heads, C / heads}).transpose(1, 2); };
    // (B, H, T, D): fused flash attention on CUDA in bfloat16/float16.
    const nb::Tensor y = nb::scaled_dot_product_attention(split_heads(qkv[0]), split_heads(qkv[1]),
                                                          split_heads(qkv[2]), {.causal = true});
    return c_proj(y.transpose(1, 2).reshape({B, T, C}));
  }
};

struct Mlp : nb::nn::Module {
  Conv1D c_fc, c_proj;
  explicit Mlp(const Config& c) : c_fc(c.width, 4 * c.width), c_proj(4 * c.width, c.width) {
    register_modules({{"c_fc", c_fc}, {"c_proj", c_proj}});
  }
  nb::Tensor forward(const nb::Tensor& x) override {
    return c_proj(nb::gelu(c_fc(x), {.tanh_approximation = true}));
  }
};

struct Block : nb::nn::Module {
  nb::nn::LayerNorm ln_1, ln_2;
  Attention attn;
  Mlp mlp;
  explicit Block(const Config& c) : ln_1({c.width}), ln_2({c.width}), attn(c), mlp(c) {
    register_modules({{"ln_1", ln_1}, {"attn", attn}, {"ln_2", ln_2}, {"mlp", mlp}});
  }
  nb::Tensor forward(const nb::Tensor& x) override {
    const nb::Tensor h = x + attn(ln_1(x));
    return h + mlp(ln_2(h));
  }
};

// The `transformer.` part of the names.
struct Transformer : nb::nn::Module {
  nb::nn::Embedding wte, wpe;
  nb::nn::ModuleList h;  // Blocks, named h.0, h.1, ...
  nb::nn::LayerNorm ln_f;
  explicit Transformer(const Config& c) : wte(c.vocab, c.width), wpe(c.context, c.width), ln_f({c.width}) {
    for (int64_t i = 0; i < c.layers; ++i) h.emplace_back<Block>(c);
    register_modules({{"wte", wte}, {"wpe", wpe}, {"h", h}, {"ln_f", ln_f}});
  }
};

struct GPT : nb::nn::Module {
  Config config;
  Transformer transformer;
  nb::nn::Linear lm_head;

  explicit GPT(const Config& c)
      : config(c), transformer(c), lm_head({.in = c.width, .out = c.vocab, .bias = false}) {
    register_modules({{"transformer", transformer}, {"lm_head", lm_head}});
    lm_head.weight = transformer.wte.weight;  // tied: one parameter under two names
    // nanoGPT's initialization: N(0, 0.02), residual projections scaled by 1/sqrt(2 * layers).
    nb::NoGradGuard no_grad;
    for (auto& [name, p] : named_parameters()) {
      if (p.dim() < 2) continue;
      const bool residual = name.ends_with("c_proj.weight");
      p.copy_(nb::randn(p.sizes()) *
              (residual ? 0.02 / std::sqrt(2.0 * static_cast<double>(c.layers)) : 0.02));
    }
  }

  // (B, T) int64 tokens -> (B, T, vocab) logits.
  nb::Tensor logits(const nb::Tensor& tokens) {
    const int64_t T = tokens.size(1);
    const nb::Tensor positions =
        nb::arange(static_cast<double>(T), {.dtype = nb::kInt64, .device = tokens.device()});
    nb::Tensor x = transformer.wte(tokens) + transformer.wpe(positions);  // (B, T, C)
    for (const auto& block : transformer.h) x = block->forward(x);
    return lm_head(transformer.ln_f(x));
  }

  // Mean next-token cross-entropy of (B, T) tokens against (B, T) targets.
  nb::Tensor loss(const nb::Tensor& tokens, const nb::Tensor& targets) {
    const nb::Tensor l = logits(tokens);
    return nb::cross_entropy(l.view({-1, config.vocab}), targets.reshape({-1}));
  }
};

}  // namespace gpt
