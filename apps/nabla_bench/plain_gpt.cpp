#include "nabla_bench/plain_gpt.h"

#include <vector>

#include "nabla/nabla.h"

namespace nabla::bench {
namespace {

struct Block : nn::Module {
  int64_t heads;
  nn::LayerNorm ln_1, ln_2;
  nn::Linear c_attn, attn_proj, c_fc, mlp_proj;
  explicit Block(const nn::models::GPT2Config& c)
      : heads(c.heads),
        ln_1({c.width}),
        ln_2({c.width}),
        c_attn({.in = c.width, .out = 3 * c.width}),
        attn_proj({.in = c.width, .out = c.width}),
        c_fc({.in = c.width, .out = 4 * c.width}),
        mlp_proj({.in = 4 * c.width, .out = c.width}) {
    register_modules({{"ln_1", ln_1},
                      {"ln_2", ln_2},
                      {"c_attn", c_attn},
                      {"attn_proj", attn_proj},
                      {"c_fc", c_fc},
                      {"mlp_proj", mlp_proj}});
  }
  Tensor forward(const Tensor& x_in) override {
    const int64_t B = x_in.size(0), T = x_in.size(1), C = x_in.size(2);
    const TensorList qkv = chunk(c_attn(ln_1(x_in)), 3, -1);
    auto split = [&](const Tensor& t) { return t.view({B, T, heads, C / heads}).transpose(1, 2); };
    AttentionOptions causal;
    causal.causal = true;
    const Tensor y = scaled_dot_product_attention(split(qkv[0]), split(qkv[1]), split(qkv[2]), causal);
    const Tensor x = x_in + attn_proj(y.transpose(1, 2).reshape({B, T, C}));
    return x + mlp_proj(gelu(c_fc(ln_2(x)), {.tanh_approximation = true}));
  }
};

class Gpt final : public PlainGpt {
 public:
  explicit Gpt(const nn::models::GPT2Config& c)
      : config_(c), wte(c.vocab, c.width), wpe(c.context, c.width), ln_f({c.width}) {
    {
      NoGradGuard no_grad;  // GPT-2's initialization of the embeddings: N(0, 0.02)
      wte.weight.mul_(0.02);
      wpe.weight.mul_(0.02);
    }
    for (int64_t i = 0; i < c.layers; ++i) blocks_.push_back(&h.emplace_back<Block>(c));
    register_modules({{"wte", wte}, {"wpe", wpe}, {"h", h}, {"ln_f", ln_f}});
  }
  Tensor forward(const Tensor& tokens) override {
    const Tensor positions =
        arange(static_cast<double>(tokens.size(1)), {.dtype = kInt64, .device = tokens.device()});
    Tensor x = wte(tokens) + wpe(positions);
    for (Block* block : blocks_) x = block->forward(x);
    return linear(ln_f(x), wte.weight);  // the head shares the token embedding
  }
  Tensor loss(const Tensor& tokens, const Tensor& targets) override {
    return cross_entropy(forward(tokens).view({-1, config_.vocab}), targets.reshape({-1}));
  }

 private:
  nn::models::GPT2Config config_;
  nn::Embedding wte, wpe;
  nn::ModuleList h;
  nn::LayerNorm ln_f;
  std::vector<Block*> blocks_;
};

}  // namespace

std::shared_ptr<PlainGpt> plain_gpt(const nn::models::GPT2Config& config) {
  return std::make_shared<Gpt>(config);
}

}  // namespace nabla::bench
