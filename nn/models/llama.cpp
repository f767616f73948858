#include "nabla/nn/models/llama.h"

#include <algorithm>
#include <limits>
#include <string>

#include "nabla/core/autograd/grad_mode.h"
#include "nabla/core/error.h"
#include "nabla/nn/graphed_step.h"
#include "nabla/ops/ops.h"

namespace nabla::nn::models {

namespace {

LinearOptions projection(int64_t in, int64_t out) {
  return {.in = in, .out = out, .bias = false};
}

RMSNormOptions norm_options(const LlamaConfig& c) {
  RMSNormOptions o;
  o.eps = c.eps;
  return o;
}

}  // namespace

LlamaAttention::LlamaAttention(const LlamaConfig& c, std::shared_ptr<RotaryCache> rope_tables)
    : q_proj(projection(c.width, c.width)),
      k_proj(projection(c.width, c.width / c.heads * c.kv_heads)),
      v_proj(projection(c.width, c.width / c.heads * c.kv_heads)),
      o_proj(projection(c.width, c.width)),
      heads(c.heads),
      kv_heads(c.kv_heads),
      context(c.context),
      rope_options{.base = c.rope_base, .scaling = c.rope_scaling},
      rope(rope_tables ? std::move(rope_tables) : std::make_shared<RotaryCache>()) {
  NABLA_CHECK(c.heads > 0 && c.width % c.heads == 0 && (c.width / c.heads) % 2 == 0,
              "Llama: width {} must be a multiple of heads {} with an even head size", c.width, c.heads);
  NABLA_CHECK(c.kv_heads > 0 && c.heads % c.kv_heads == 0,
              "Llama: heads {} must be a multiple of kv_heads {} (each key/value head serves as many query "
              "heads)",
              c.heads, c.kv_heads);
  register_modules({{"q_proj", q_proj}, {"k_proj", k_proj}, {"v_proj", v_proj}, {"o_proj", o_proj}});
}

Tensor LlamaAttention::forward(const Tensor& x) {
  Tensor keys, values;
  return forward(x, keys, values, 0, 0);
}

const RotaryCache& LlamaAttention::rope_for(const Tensor& x) {
  if (!rope->defined() || rope->options().device != x.device()) {
    RotaryCacheOptions options = rope_options;
    options.device = x.device();
    *rope = RotaryCache(x.size(2) / heads, context, options);
  }
  return *rope;
}

namespace {

// The projections of x (B, T, C) split into heads: q (B, H, T, D), k and v (B, Hkv, T, D), unrotated.
struct Heads {
  Tensor q, k, v;
};

Heads split_heads(LlamaAttention& a, const Tensor& x) {
  const int64_t B = x.size(0), T = x.size(1), D = x.size(2) / a.heads;
  return {a.q_proj(x).view({B, T, a.heads, D}).transpose(1, 2),
          a.k_proj(x).view({B, T, a.kv_heads, D}).transpose(1, 2),
          a.v_proj(x).view({B, T, a.kv_heads, D}).transpose(1, 2)};
}

void check_inference(const char* what) {
  NABLA_CHECK(!GradMode::is_enabled(), "Llama: {} is for inference; run it under NoGradGuard (generate does)",
              what);
}

}  // namespace

Tensor LlamaAttention::forward(const Tensor& x, Tensor& keys, Tensor& values, int64_t offset,
                               int64_t capacity) {
  const int64_t B = x.size(0), T = x.size(1), C = x.size(2), groups = heads / kv_heads;
  Heads h = split_heads(*this, x);
  auto [q, k] = rope_for(x)(h.q, h.k, offset);
  Tensor v = h.v;
  if (capacity > 0) {
    // The cache: this chunk's keys and values written in place, then attention over the filled
    // positions, read through views of the buffers (no copy, no allocation per token).
    check_inference("the key/value cache");
    if (!keys.defined()) {
      // Zeroed once: decode's masked attention spans slots not yet written, and a masked weight
      // (0) times a stale NaN bit pattern would still be NaN.
      keys = zeros({B, kv_heads, capacity, k.size(3)}, k.options());
      values = zeros({B, kv_heads, capacity, v.size(3)}, v.options());
    }
    NABLA_CHECK(offset + T <= keys.size(2) && keys.size(0) == B && keys.dtype() == k.dtype(),
                "Llama: the cache holds {} positions of {}, and positions {} .. {} of {} do not fit it",
                keys.size(2), describe(keys), offset, offset + T - 1, describe(k));
    keys.narrow(2, offset, T).copy_(k);
    values.narrow(2, offset, T).copy_(v);
    k = keys.narrow(2, 0, offset + T);
    v = values.narrow(2, 0, offset + T);
  }
  const int64_t L = k.size(2);  // every key position: the cached ones, then these
  // Grouped-query attention reads the shared heads (Hugging Face's repeat_kv, without the copy):
  // key/value head j serves query heads j * groups .. (j + 1) * groups - 1.
  AttentionOptions attend;
  attend.enable_gqa = groups > 1;
  if (L == T) {
    attend.causal = true;
  } else if (T > 1) {
    // Query i sits at position L - T + i and sees the keys up to it.
    const TensorOptions positions{.dtype = kInt64, .device = x.device()};
    const Tensor query_at =
        arange(static_cast<double>(L - T), static_cast<double>(L), 1, positions).unsqueeze(1);
    attend.mask = le(arange(static_cast<double>(L), positions).unsqueeze(0), query_at);
  }  // one new query sees every key
  const Tensor y = scaled_dot_product_attention(q, k, v, attend);
  return o_proj(y.transpose(1, 2).reshape({B, T, C}));
}

Tensor LlamaAttention::decode(const Tensor& x, Tensor& keys, Tensor& values, const Tensor& position,
                              const Tensor& mask) {
  check_inference("decode");
  const int64_t B = x.size(0), C = x.size(2);
  NABLA_CHECK(
      x.size(1) == 1 && keys.defined() && values.defined() && keys.size(0) == B,
      "Llama: decode takes one token per row and a cache filled by a prompt, got {} and a cache of {}",
      describe(x), keys.defined() ? describe(keys) : std::string("nothing"));
  Heads h = split_heads(*this, x);
  auto [q, k] = rope_for(x).at(h.q, h.k, position);
  // The new key and value go to `position` of the buffers: a write at an index held on the device.
  index_copy_(keys, 2, position, k);
  index_copy_(values, 2, position, h.v);
  // Attention over the whole capacity (a shape that never changes), the keys after `position`
  // masked out: zeros not yet written, or values of an earlier use of the buffers.
  AttentionOptions attend;
  attend.enable_gqa = heads > kv_heads;
  attend.mask = mask;
  const Tensor y = scaled_dot_product_attention(q, keys, values, attend);
  return o_proj(y.transpose(1, 2).reshape({B, 1, C}));
}

LlamaMLP::LlamaMLP(const LlamaConfig& c)
    : gate_proj(projection(c.width, c.hidden)),
      up_proj(projection(c.width, c.hidden)),
      down_proj(projection(c.hidden, c.width)) {
  register_modules({{"gate_proj", gate_proj}, {"up_proj", up_proj}, {"down_proj", down_proj}});
}

Tensor LlamaMLP::forward(const Tensor& x) {
  return down_proj(silu(gate_proj(x)) * up_proj(x));
}

LlamaDecoderLayer::LlamaDecoderLayer(const LlamaConfig& c, std::shared_ptr<RotaryCache> rope)
    : input_layernorm({c.width}, norm_options(c)),
      post_attention_layernorm({c.width}, norm_options(c)),
      self_attn(c, std::move(rope)),
      mlp(c) {
  register_modules({{"input_layernorm", input_layernorm},
                    {"self_attn", self_attn},
                    {"post_attention_layernorm", post_attention_layernorm},
                    {"mlp", mlp}});
}

Tensor LlamaDecoderLayer::forward(const Tensor& x) {
  const Tensor h = x + self_attn(input_layernorm(x));
  return h + mlp(post_attention_layernorm(h));
}

Tensor LlamaDecoderLayer::forward(const Tensor& x, Tensor& keys, Tensor& values, int64_t offset,
                                  int64_t capacity) {
  const Tensor h = x + self_attn.forward(input_layernorm(x), keys, values, offset, capacity);
  return h + mlp(post_attention_layernorm(h));
}

Tensor LlamaDecoderLayer::decode(const Tensor& x, Tensor& keys, Tensor& values, const Tensor& position,
                                 const Tensor& mask) {
  const Tensor h = x + self_attn.decode(input_layernorm(x), keys, values, position, mask);
  return h + mlp(post_attention_layernorm(h));
}

LlamaModel::LlamaModel(const LlamaConfig& c)
    : embed_tokens(c.vocab, c.width), norm({c.width}, norm_options(c)) {
  const auto rope = std::make_shared<RotaryCache>();  // one table for every layer
  for (int64_t i = 0; i < c.layers; ++i) layers.emplace_back<LlamaDecoderLayer>(c, rope);
  register_modules({{"embed_tokens", embed_tokens}, {"layers", layers}, {"norm", norm}});
}

Tensor LlamaModel::forward(const Tensor& tokens) {
  Tensor x = embed_tokens(tokens);
  for (const auto& layer : layers) x = (*layer)(x);
  return norm(x);
}

Tensor LlamaModel::forward(const Tensor& tokens, LlamaCache& cache) {
  cache.keys.resize(layers.size());
  cache.values.resize(layers.size());
  Tensor x = embed_tokens(tokens);
  for (size_t i = 0; i < layers.size(); ++i) {
    x = static_cast<LlamaDecoderLayer&>(layers[i]).forward(x, cache.keys[i], cache.values[i], cache.length,
                                                           cache.capacity);
  }
  cache.length += tokens.size(1);
  return norm(x);
}

Tensor LlamaModel::decode(const Tensor& token, LlamaCache& cache, const Tensor& position) {
  NABLA_CHECK(cache.keys.size() == layers.size(),
              "Llama: decode needs a cache filled by a prompt (logits(prompt, cache)) first");
  // One mask for every layer: key slot j is seen (0 added) when j <= position, else -inf.
  const TensorOptions on_device{.device = token.device()};
  const Tensor slots =
      arange(static_cast<double>(cache.keys[0].size(2)), {.dtype = kInt64, .device = token.device()});
  const Tensor mask = where(le(slots, position), zeros({}, on_device),
                            full({}, -std::numeric_limits<double>::infinity(), on_device));
  Tensor x = embed_tokens(token);
  for (size_t i = 0; i < layers.size(); ++i) {
    x = static_cast<LlamaDecoderLayer&>(layers[i]).decode(x, cache.keys[i], cache.values[i], position, mask);
  }
  return norm(x);
}

Llama::Llama(const LlamaConfig& c) : config(c), model(c), lm_head(projection(c.width, c.vocab)) {
  register_modules({{"model", model}, {"lm_head", lm_head}});
  if (c.tie_embeddings) lm_head.weight = model.embed_tokens.weight;  // one parameter, two names
  NoGradGuard no_grad;
  for (auto& [name, p] : named_parameters()) {
    if (p.dim() >= 2) p.copy_(randn(p.sizes()) * 0.02);
  }
}

Tensor Llama::logits(const Tensor& tokens) {
  NABLA_CHECK(tokens.dim() == 2, "Llama: expected (batch, time) tokens, got {} dims", tokens.dim());
  const int64_t T = tokens.size(1);
  NABLA_CHECK(T >= 1 && T <= config.context, "Llama: {} tokens per row; the model's context holds 1 to {}", T,
              config.context);
  return lm_head(model(tokens));
}

Tensor Llama::logits(const Tensor& tokens, LlamaCache& cache) {
  NABLA_CHECK(tokens.dim() == 2 && tokens.size(1) >= 1,
              "Llama: expected (batch, time) tokens with time >= 1, got {}", describe(tokens));
  if (cache.capacity == 0) cache.capacity = config.context;
  NABLA_CHECK(cache.capacity <= config.context,
              "Llama: a cache of {} positions passes the model's context of {}", cache.capacity,
              config.context);
  NABLA_CHECK(
      cache.length + tokens.size(1) <= cache.capacity,
      "Llama: {} cached positions and {} new ones pass the cache's capacity of {} (the model's context "
      "is {})",
      cache.length, tokens.size(1), cache.capacity, config.context);
  return lm_head(model.forward(tokens, cache));
}

Tensor Llama::decode_step(const Tensor& token, const Tensor& position, LlamaCache& cache) {
  NABLA_CHECK(token.defined() && token.dim() == 2 && token.size(1) == 1 && token.dtype() == kInt64,
              "Llama: decode_step takes (batch, 1) int64 tokens, got {}", describe(token));
  NABLA_CHECK(position.defined() && position.dtype() == kInt64 && position.dim() == 1 &&
                  position.size(0) == 1 && position.device() == token.device(),
              "Llama: decode_step takes the position as a 1-element int64 tensor on {}, got {}",
              token.device().str(), describe(position));
  return lm_head(model.decode(token, cache, position)).select(1, 0);
}

namespace {

// The next token of each row, (B, 1), from its (B, vocab) logits, as `o` says.
Tensor next_token(const Tensor& logits, const GenerateOptions& o) {
  if (o.temperature == 0) return argmax(logits, -1, /*keepdim=*/true);
  Tensor scaled = logits.to(kFloat32) / o.temperature;
  if (o.top_k > 0 && o.top_k < scaled.size(-1)) {
    const Tensor kth = topk(scaled, o.top_k).first.narrow(-1, o.top_k - 1, 1);
    scaled =
        where(lt(scaled, kth), full({}, -std::numeric_limits<double>::infinity(), scaled.options()), scaled);
  }
  MultinomialOptions sampling;
  sampling.generator = o.generator;
  const Tensor probs = softmax(scaled, -1);
  if (o.top_p >= 1) return multinomial(probs, 1, sampling);
  // Keep the most likely tokens until their mass reaches top_p: a token goes when the mass of
  // those before it already does (so the most likely always stays). Sample among the kept ones
  // in sorted order, then map back to token ids.
  const auto [sorted, order] = sort(probs, {.dim = -1, .descending = true});
  const Tensor before = cumsum(sorted, -1) - sorted;
  const Tensor kept =
      where(ge(before, full({}, o.top_p, before.options())), zeros({}, sorted.options()), sorted);
  return gather(order, -1, multinomial(kept, 1, sampling));
}

}  // namespace

Tensor Llama::generate(const Tensor& prompt, const GenerateOptions& o) {
  NABLA_CHECK(o.max_new_tokens >= 0 && o.temperature >= 0 && o.top_k >= 0 && o.top_p > 0 && o.top_p <= 1,
              "Llama::generate: max_new_tokens, temperature and top_k must be >= 0 and top_p in (0, 1], got "
              "{}, {}, {} and {}",
              o.max_new_tokens, o.temperature, o.top_k, o.top_p);
  NoGradGuard no_grad;
  LlamaCache cache;
  const int64_t T = prompt.size(1), B = prompt.size(0);
  // Exactly what this generation fills: the prompt, then every new token but the last.
  cache.capacity = T + std::max<int64_t>(o.max_new_tokens - 1, 0);
  if (o.max_new_tokens == 0) return prompt.clone();
  Tensor next = next_token(logits(prompt, cache).select(1, -1), o);  // the prefill: one pass
  if (!o.cuda_graph) {
    if (o.stats != nullptr) *o.stats = {.graph_replays = 0, .eager_reason = "cuda_graph is off"};
    TensorList out = {prompt, next};
    for (int64_t i = 1; i < o.max_new_tokens; ++i) {
      next = next_token(logits(next, cache).select(1, -1), o);
      out.push_back(next);
    }
    return cat(out, 1);
  }
  // Fixed-shape steps (decode_step) with the token and its position in device buffers that the
  // step itself advances, so every step after the warm-up is one replay of a CUDA graph and the
  // host never waits for the device until the tokens are read.
  Tensor generated = Tensor::empty({B, o.max_new_tokens}, next.options());
  generated.narrow(1, 0, 1).copy_(next);
  Tensor token = next.clone();
  Tensor position = full({1}, static_cast<double>(T), {.dtype = kInt64, .device = prompt.device()});
  GraphedStep step(
      [&](const TensorList& in) {
        NoGradGuard inference;
        Tensor token_buffer = in[0], position_buffer = in[1];
        Tensor chosen = next_token(decode_step(token_buffer, position_buffer, cache), o);
        token_buffer.copy_(chosen);
        position_buffer.add_(1.0);
        return chosen;
      },
      {.warmup = 2, .release_eager_cache = false, .adopt_inputs = true});
  for (int64_t i = 1; i < o.max_new_tokens; ++i) generated.narrow(1, i, 1).copy_(step(token, position));
  if (o.stats != nullptr) *o.stats = {.graph_replays = step.replays(), .eager_reason = step.eager_reason()};
  cache.length = T + o.max_new_tokens - 1;
  return cat({prompt, generated}, 1);
}

int64_t LlamaCache::bytes() const {
  int64_t total = 0;
  for (const auto* list : {&keys, &values}) {
    for (const Tensor& t : *list)
      total += t.defined() ? t.numel() * static_cast<int64_t>(itemsize(t.dtype())) : 0;
  }
  return total;
}

Tensor Llama::loss(const Tensor& tokens, const Tensor& targets) {
  const Tensor l = logits(tokens);
  return cross_entropy(l.view({-1, config.vocab}), targets.reshape({-1}));
}

LoadResult Llama::load_hf_state_dict(const StateDict& dict) {
  StateDict kept;
  for (const auto& [key, t] : dict) {
    if (key.ends_with(".rotary_emb.inv_freq")) continue;
    kept[key] = t;
  }
  // A tied checkpoint may omit lm_head.weight: it is the embedding's then.
  if (config.tie_embeddings && !kept.count("lm_head.weight") && kept.count("model.embed_tokens.weight")) {
    kept["lm_head.weight"] = kept.at("model.embed_tokens.weight");
  }
  return load_state_dict(kept, /*strict=*/true);
}

}  // namespace nabla::nn::models
