// Public header. GPT-2 (nanoGPT's model): learned token and position embeddings, pre-norm blocks
// of causal self-attention and a GELU(tanh) MLP, a final LayerNorm and an output layer tied to
// the token embedding.
//
//   nabla::nn::models::GPT2 model({.vocab = 50304, .layers = 12, .heads = 12, .width = 768});
//   nabla::Tensor logits = model.logits(tokens);        // (B, T) int64 -> (B, T, vocab)
//   nabla::Tensor loss = model.loss(tokens, targets);   // mean next-token cross-entropy
//
// Parameter names and layouts are Hugging Face's GPT2LMHeadModel's, so its checkpoints load
// unchanged through load_hf_state_dict (with .vocab = 50257: the default 50304 is nanoGPT's
// padded vocabulary): transformer.wte/wpe, transformer.h.{i}.ln_1 / attn.c_attn / attn.c_proj /
// ln_2 / mlp.c_fc / mlp.c_proj, transformer.ln_f, and lm_head.weight tied to
// transformer.wte.weight. The projections are GPT-2's Conv1D: weights stored (in, out), so
// c_attn.weight is (C, 3C). Written with nabla's public API only (examples/gpt trains it).
#pragma once

#include <cstdint>

#include "nabla/nn/containers.h"
#include "nabla/nn/layers.h"

namespace nabla::nn::models {

struct GPT2Config {
  int64_t vocab = 50304;
  int64_t context = 1024;
  int64_t layers = 12;
  int64_t heads = 12;
  int64_t width = 768;
};

// GPT-2's Conv1D: y = x W + b with W stored (in, out). (*, in) -> (*, out).
class Conv1D : public Module {
 public:
  Conv1D(int64_t in, int64_t out);
  Tensor forward(const Tensor& x) override;
  Tensor forward(const Tensor& x, Activation activation);  // act(forward(x)), fused on CUDA
  Tensor weight, bias;
};

// Causal self-attention: one (C, 3C) projection to q, k, v, fused attention, an output projection.
class GPT2Attention : public Module {
 public:
  explicit GPT2Attention(const GPT2Config& c);
  Tensor forward(const Tensor& x) override;  // (B, T, C) -> (B, T, C)
  Conv1D c_attn, c_proj;
  int64_t heads;
};

class GPT2MLP : public Module {
 public:
  explicit GPT2MLP(const GPT2Config& c);
  Tensor forward(const Tensor& x) override;
  Conv1D c_fc, c_proj;
};

class GPT2Block : public Module {
 public:
  explicit GPT2Block(const GPT2Config& c);
  Tensor forward(const Tensor& x) override;  // x + attn(ln_1(x)), then h + mlp(ln_2(h))
  LayerNorm ln_1, ln_2;
  GPT2Attention attn;
  GPT2MLP mlp;
};

// The `transformer.` part of the names.
class GPT2Transformer : public Module {
 public:
  explicit GPT2Transformer(const GPT2Config& c);
  Embedding wte, wpe;
  ModuleList h;  // GPT2Blocks, named h.0, h.1, ...
  LayerNorm ln_f;
};

class GPT2 : public Module {
 public:
  // nanoGPT's initialization, from the global generator: N(0, 0.02) for every matrix, residual
  // projections (c_proj) scaled by 1/sqrt(2 * layers), zero biases, unit LayerNorm gains.
  explicit GPT2(const GPT2Config& c = {});

  Tensor forward(const Tensor& tokens) override { return logits(tokens); }
  // (B, T) int64 tokens, T <= context -> (B, T, vocab) logits.
  Tensor logits(const Tensor& tokens);
  // Mean next-token cross-entropy of (B, T) tokens against (B, T) targets.
  Tensor loss(const Tensor& tokens, const Tensor& targets);

  // Loads a Hugging Face GPT-2 state dict strictly, accepting and ignoring the attn.bias and
  // attn.masked_bias buffers older files carry (the causal mask, which nabla does not store).
  LoadResult load_hf_state_dict(const StateDict& dict);

  GPT2Config config;
  GPT2Transformer transformer;
  Linear lm_head;
};

}  // namespace nabla::nn::models
