#include "nabla/nn/models/vit.h"

#include <fmt/format.h>

#include <cmath>

#include "nabla/nn/init.h"
#include "nabla/ops/factory.h"
#include "nabla/ops/indexing.h"

namespace nabla::nn::models {

namespace {

LayerNormOptions vit_norm() {
  return {.eps = 1e-6};
}

}  // namespace

EncoderBlock::EncoderBlock(const VisionTransformerOptions& o)
    : ln_1({o.hidden_dim}, vit_norm()),
      ln_2({o.hidden_dim}, vit_norm()),
      self_attention({.embed_dim = o.hidden_dim,
                      .num_heads = o.num_heads,
                      .dropout = o.attention_dropout,
                      .batch_first = true}),
      dropout(o.dropout) {
  auto& fc1 = mlp.emplace_back<Linear>(LinearOptions{.in = o.hidden_dim, .out = o.mlp_dim});
  mlp.emplace_back<GELU>();
  mlp.emplace_back<Dropout>(o.dropout);
  auto& fc2 = mlp.emplace_back<Linear>(LinearOptions{.in = o.mlp_dim, .out = o.hidden_dim});
  mlp.emplace_back<Dropout>(o.dropout);
  // torchvision's MLPBlock initialization.
  for (Linear* fc : {&fc1, &fc2}) {
    init::xavier_uniform_(fc->weight);
    init::normal_(fc->bias, 0.0, 1e-6);
  }
  register_modules({{"ln_1", ln_1},
                    {"self_attention", self_attention},
                    {"dropout", dropout},
                    {"ln_2", ln_2},
                    {"mlp", mlp}});
}

Tensor EncoderBlock::forward(const Tensor& x) {
  const Tensor h = dropout(self_attention(ln_1(x))) + x;
  return h + mlp(ln_2(h));
}

VitEncoder::VitEncoder(const VisionTransformerOptions& o)
    : dropout(o.dropout), ln({o.hidden_dim}, vit_norm()) {
  const int64_t patches = (o.image_size / o.patch_size) * (o.image_size / o.patch_size);
  pos_embedding = empty({1, patches + 1, o.hidden_dim});
  init::normal_(pos_embedding, 0.0, 0.02);
  register_parameter("pos_embedding", pos_embedding);
  for (int64_t i = 0; i < o.num_layers; ++i)
    layers.insert(fmt::format("encoder_layer_{}", i), std::make_shared<EncoderBlock>(o));
  register_modules({{"dropout", dropout}, {"layers", layers}, {"ln", ln}});
}

Tensor VitEncoder::forward(const Tensor& x) {
  Tensor h = dropout(x + pos_embedding);
  for (const auto& [name, layer] : layers) h = (*layer)(h);
  return ln(h);
}

VisionTransformer::VisionTransformer(const VisionTransformerOptions& o)
    : conv_proj({.in = o.in_channels, .out = o.hidden_dim, .kernel = o.patch_size, .stride = o.patch_size}),
      encoder(o),
      options_(o) {
  NABLA_CHECK(o.patch_size > 0 && o.image_size % o.patch_size == 0 && o.num_heads > 0 &&
                  o.hidden_dim % o.num_heads == 0 && o.num_layers > 0 && o.num_classes > 0 &&
                  o.in_channels > 0,
              "VisionTransformer: the patch size ({}) must divide the image size ({}) and the heads ({}) the "
              "hidden size ({}), with at least one layer, class and input channel",
              o.patch_size, o.image_size, o.num_heads, o.hidden_dim);
  class_token = zeros({1, 1, o.hidden_dim});
  register_parameter("class_token", class_token);
  auto head = std::make_shared<Linear>(LinearOptions{.in = o.hidden_dim, .out = o.num_classes});
  heads.insert("head", head);
  register_modules({{"conv_proj", conv_proj}, {"encoder", encoder}, {"heads", heads}});
  // torchvision's initialization: the patch projection from N(0, 1 / fan_in) truncated, the
  // head at zero.
  const double fan_in = static_cast<double>(o.in_channels * o.patch_size * o.patch_size);
  init::trunc_normal_(conv_proj.weight, {.std = std::sqrt(1.0 / fan_in)});
  init::zeros_(conv_proj.bias);
  init::zeros_(head->weight);
  init::zeros_(head->bias);
}

Tensor VisionTransformer::forward(const Tensor& x) {
  NABLA_CHECK(x.dim() == 4 && x.size(1) == options_.in_channels && x.size(2) == options_.image_size &&
                  x.size(3) == options_.image_size,
              "VisionTransformer: expected images (N, {}, {}, {}), got {}", options_.in_channels,
              options_.image_size, options_.image_size, describe(x));
  const int64_t n = x.size(0);
  // (N, 3, H, W) -> (N, hidden, h, w) -> (N, h * w, hidden): one token per patch.
  Tensor tokens = conv_proj(x).flatten(2).transpose(1, 2);
  tokens = cat({class_token.expand({n, -1, -1}), tokens}, 1);
  return heads["head"](encoder(tokens).select(1, 0));
}

std::shared_ptr<VisionTransformer> vit_b_16(const VisionTransformerOptions& options) {
  VisionTransformerOptions o = options;
  o.patch_size = 16, o.num_layers = 12, o.num_heads = 12, o.hidden_dim = 768, o.mlp_dim = 3072;
  return std::make_shared<VisionTransformer>(o);
}

}  // namespace nabla::nn::models
