// Public header. LLaMA (and the models built from its blocks: Mistral, Qwen2 without biases):
// token embeddings, pre-norm blocks of causal self-attention with rotary position embeddings and
// grouped-query attention (fewer key/value heads than query heads), a SwiGLU MLP, RMSNorm, and
// an output layer (tied to the embedding or not).
//
//   nabla::nn::models::Llama model({.vocab = 32000, .layers = 12, .heads = 12, .kv_heads = 4});
//   nabla::Tensor logits = model.logits(tokens);        // (B, T) int64 -> (B, T, vocab)
//   nabla::Tensor loss = model.loss(tokens, targets);   // mean next-token cross-entropy
//
// Parameter names and layouts are Hugging Face's LlamaForCausalLM's, so its checkpoints load
// unchanged through load_hf_state_dict: model.embed_tokens, model.layers.{i}.input_layernorm /
// self_attn.{q,k,v,o}_proj / post_attention_layernorm / mlp.{gate,up,down}_proj, model.norm,
// lm_head. Rotary embeddings rotate the halves of each head (Hugging Face's layout) from one
// RotaryCache the layers share (Llama 3's rope_scaling included); attention reads the grouped
// key/value heads in place (enable_gqa). Written with nabla's public API only.
//
//   nabla::Tensor out = model.generate(prompt, {.max_new_tokens = 64, .temperature = 0.8, .top_p = 0.95});
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "nabla/core/generator.h"
#include "nabla/nn/attention.h"
#include "nabla/nn/containers.h"
#include "nabla/nn/layers.h"
#include "nabla/ops/rotary.h"

namespace nabla::nn::models {

struct LlamaConfig {
  int64_t vocab = 32000;
  int64_t context = 2048;
  int64_t layers = 12;
  int64_t heads = 12;
  int64_t kv_heads = 4;  // grouped-query attention: each serves heads / kv_heads query heads
  int64_t width = 768;
  int64_t hidden = 2048;                           // the SwiGLU MLP's inner width
  double rope_base = 10000.0;                      // rope_theta
  std::optional<RotaryScaling> rope_scaling = {};  // Llama 3's rope_scaling ("rope_type": "llama3")
  double eps = 1e-5;                               // rms_norm_eps
  bool tie_embeddings = false;
};

// Generation's key/value cache: per layer, one key and one value buffer (B, kv_heads, capacity,
// D), allocated (zeroed) at the first use in the projections' dtype and written in place, of which the
// first `length` positions are filled; each key/value head is stored once. Its memory is
// bytes() = 2 * layers * B * kv_heads * capacity * D * itemsize, whatever the length. For
// inference only (under NoGradGuard): the cache records no gradients.
struct LlamaCache {
  std::vector<Tensor> keys, values;
  int64_t length = 0;
  int64_t capacity = 0;  // positions to allocate; 0: the model's context
  int64_t bytes() const;
};

// What generate did with .cuda_graph, for tests and benchmarks.
struct GenerateStats {
  int64_t graph_replays = 0;  // new tokens made by replaying the captured step
  std::string eager_reason;   // why steps ran eagerly after the warm-up ("" when none did)
};

struct GenerateOptions {
  int64_t max_new_tokens = 32;
  double temperature = 0.0;        // 0: greedy (argmax); else sample softmax(logits / temperature)
  int64_t top_k = 0;               // sample among the k most likely tokens only (0: all)
  double top_p = 1.0;              // nucleus sampling: the fewest most likely tokens whose
                                   // probabilities sum to at least top_p (1: all), after top_k
  Generator* generator = nullptr;  // for sampling; nullptr: the default generator of the device
  // Each new token after the first is a fixed-shape step (Llama::decode_step) run through
  // nn::make_graphed_step: on CUDA, after two eager warm-up tokens, one replay of a captured CUDA
  // graph per token (no launches per op, the step compiler's fused kernels, no host wait until
  // the end); elsewhere the same steps run eagerly. Tokens equal those of the default loop up to
  // the rounding of attention over the padded cache.
  bool cuda_graph = false;
  GenerateStats* stats = nullptr;  // filled in when given
};

class LlamaAttention : public Module {
 public:
  // `rope`: the rotary tables, shared by the model's layers (a new one when null).
  explicit LlamaAttention(const LlamaConfig& c, std::shared_ptr<RotaryCache> rope = nullptr);
  Tensor forward(const Tensor& x) override;  // (B, T, C) at positions 0 .. T-1
  // x at positions `offset` .. offset + T - 1, attending to the cached keys and values before it,
  // after writing its own at offset .. offset + T - 1 of the cache's buffers (B, kv_heads,
  // capacity, D), allocated here when undefined. Under NoGradGuard only.
  Tensor forward(const Tensor& x, Tensor& keys, Tensor& values, int64_t offset, int64_t capacity);
  // x (B, 1, C) at the position held in `position` (1-element int64, on x's device): its key and
  // value written there, attention over the buffers' whole capacity with `mask` added to the
  // scores (float32 (capacity): 0 up to the position, -inf after; LlamaModel::decode makes it once
  // per step for every layer). Fixed shapes, nothing read on the host: capturable in a CUDA graph.
  // NoGradGuard only.
  Tensor decode(const Tensor& x, Tensor& keys, Tensor& values, const Tensor& position, const Tensor& mask);
  // The rotary tables on x's device (built there at the first use).
  const RotaryCache& rope_for(const Tensor& x);
  Linear q_proj, k_proj, v_proj, o_proj;
  int64_t heads, kv_heads, context;
  RotaryCacheOptions rope_options;
  // The cos/sin tables of positions 0 .. context - 1, built on the device of the first input
  // (again when the model moves): not parameters, not in the state dict.
  std::shared_ptr<RotaryCache> rope;
};

class LlamaMLP : public Module {
 public:
  explicit LlamaMLP(const LlamaConfig& c);
  Tensor forward(const Tensor& x) override;  // down_proj(silu(gate_proj(x)) * up_proj(x))
  Linear gate_proj, up_proj, down_proj;
};

class LlamaDecoderLayer : public Module {
 public:
  explicit LlamaDecoderLayer(const LlamaConfig& c, std::shared_ptr<RotaryCache> rope = nullptr);
  Tensor forward(const Tensor& x) override;  // h = x + attn(norm(x)); h + mlp(norm(h))
  Tensor forward(const Tensor& x, Tensor& keys, Tensor& values, int64_t offset, int64_t capacity);
  Tensor decode(const Tensor& x, Tensor& keys, Tensor& values, const Tensor& position, const Tensor& mask);
  RMSNorm input_layernorm, post_attention_layernorm;
  LlamaAttention self_attn;
  LlamaMLP mlp;
};

// The `model.` part of the names.
class LlamaModel : public Module {
 public:
  explicit LlamaModel(const LlamaConfig& c);
  Tensor forward(const Tensor& tokens) override;            // (B, T) -> the final norm's (B, T, width)
  Tensor forward(const Tensor& tokens, LlamaCache& cache);  // at positions cache.length ..
  // (B, 1) tokens at the position held in `position` (see Llama::decode_step).
  Tensor decode(const Tensor& token, LlamaCache& cache, const Tensor& position);
  Embedding embed_tokens;
  ModuleList layers;  // LlamaDecoderLayers, named layers.0, layers.1, ...
  RMSNorm norm;
};

class Llama : public Module {
 public:
  // Hugging Face's initialization, from the global generator: N(0, 0.02) for every matrix and
  // the embedding, unit RMSNorm gains.
  explicit Llama(const LlamaConfig& c = {});

  Tensor forward(const Tensor& tokens) override { return logits(tokens); }
  // (B, T) int64 tokens, T <= context -> (B, T, vocab) logits.
  Tensor logits(const Tensor& tokens);
  // The logits of `tokens` at positions cache.length .. (the positions before them come from
  // the cache, which this extends): a prompt, then one token at a time.
  Tensor logits(const Tensor& tokens, LlamaCache& cache);
  // Mean next-token cross-entropy of (B, T) tokens against (B, T) targets.
  Tensor loss(const Tensor& tokens, const Tensor& targets);

  // One decoding step at a position held on the device: (B, 1) int64 `token` at the position in
  // `position` (a 1-element int64 tensor on the token's device, below the cache's capacity),
  // attending to the cache's positions 0 .. position, its key and value written there. Every
  // shape is fixed (attention spans the cache's whole capacity, the positions after `position`
  // masked) and nothing is read on the host, so the step can be captured in a CUDA graph and
  // replayed for each new token, the graph itself advancing the position (generate's
  // .cuda_graph). Returns (B, vocab) logits. The cache must hold a prompt (logits(prompt,
  // cache)); its length is not changed: the position is the caller's. Under NoGradGuard only.
  Tensor decode_step(const Tensor& token, const Tensor& position, LlamaCache& cache);

  // (B, T) prompt -> (B, T + max_new_tokens) tokens. The prompt runs once; each new token then
  // runs alone against the key/value cache. No gradients are recorded.
  Tensor generate(const Tensor& prompt, const GenerateOptions& options = {});

  // Loads a Hugging Face LlamaForCausalLM state dict strictly, accepting and ignoring the
  // rotary tables older files carry (self_attn.rotary_emb.inv_freq), which nabla computes.
  LoadResult load_hf_state_dict(const StateDict& dict);

  LlamaConfig config;
  LlamaModel model;
  Linear lm_head;
};

// ---- Hugging Face checkpoints ----------------------------------------------------------------------

// A LlamaConfig from the text of Hugging Face's config.json (`name` goes into errors):
// vocab_size, hidden_size, intermediate_size, num_hidden_layers, num_attention_heads (required);
// num_key_value_heads (default: the heads), max_position_embeddings (2048), rms_norm_eps (1e-6),
// rope_theta (10000), rope_scaling (null, "rope_type": "default", or "llama3" with factor,
// low_freq_factor, high_freq_factor and original_max_position_embeddings; transformers 5's
// "rope_parameters" holds rope_theta and these), tie_word_embeddings (false). What
// this model cannot be is an error naming the field: a head_dim other than hidden_size /
// num_attention_heads, biases (attention_bias, mlp_bias), a hidden_act other than silu, another
// rope_type, head counts that do not divide.
LlamaConfig llama_config_from_json(const std::string& text, const std::string& name = "config.json");
LlamaConfig load_llama_config(const std::string& path);

// The model of a Hugging Face folder: config.json, and model.safetensors or a sharded
// model.safetensors.index.json (load_safetensors_checkpoint), loaded strictly
// (load_hf_state_dict: every missing, unexpected or wrongly shaped key named), with parameters
// of `dtype` (the checkpoint's values converted) on `device`.
//
//   auto model = nabla::nn::models::load_hf_llama("Llama-3.2-1B", nabla::Device::cuda(0), nabla::kBFloat16);
std::unique_ptr<Llama> load_hf_llama(const std::string& folder, Device device = Device::cpu(),
                                     DType dtype = kFloat32);

}  // namespace nabla::nn::models
