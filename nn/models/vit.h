// Public header. The Vision Transformer (Dosovitskiy et al. 2020) as torchvision builds it, with
// its names (conv_proj, class_token, encoder.pos_embedding, encoder.layers.encoder_layer_{i}.
// {ln_1, self_attention, ln_2, mlp.0, mlp.3}, encoder.ln, heads.head), so torchvision's state
// dicts load with strict = true. The attention is nn::MultiheadAttention (fused on CUDA in
// 16-bit through scaled_dot_product_attention).
//
//   auto model = nabla::nn::models::vit_b_16({.num_classes = 1000});
//   auto logits = model->forward(images);  // (N, 3, 224, 224) -> (N, num_classes)
#pragma once

#include <memory>

#include "nabla/nn/attention.h"
#include "nabla/nn/containers.h"
#include "nabla/nn/layers.h"

namespace nabla::nn::models {

struct VisionTransformerOptions {
  int64_t image_size = 224;
  int64_t patch_size = 16;
  int64_t num_layers = 12;
  int64_t num_heads = 12;
  int64_t hidden_dim = 768;
  int64_t mlp_dim = 3072;
  double dropout = 0.0;
  double attention_dropout = 0.0;
  int64_t num_classes = 1000;
  int64_t in_channels = 3;  // the images' channels (torchvision: always 3)
};

// Pre-norm: x + attention(ln_1(x)), then that + mlp(ln_2(that)); LayerNorm eps 1e-6.
class EncoderBlock : public Module {
 public:
  explicit EncoderBlock(const VisionTransformerOptions& options);
  Tensor forward(const Tensor& x) override;
  LayerNorm ln_1, ln_2;
  MultiheadAttention self_attention;
  Dropout dropout;
  Sequential mlp;  // Linear "0", GELU "1", Dropout "2", Linear "3", Dropout "4"
};

class VitEncoder : public Module {
 public:
  explicit VitEncoder(const VisionTransformerOptions& options);
  Tensor forward(const Tensor& x) override;
  Tensor pos_embedding;  // (1, patches + 1, hidden_dim)
  Dropout dropout;
  ModuleDict layers;  // encoder_layer_0 ...
  LayerNorm ln;
};

class VisionTransformer : public Module {
 public:
  explicit VisionTransformer(const VisionTransformerOptions& options);
  Tensor forward(const Tensor& x) override;
  Conv2d conv_proj;    // the patches: kernel = stride = patch_size
  Tensor class_token;  // (1, 1, hidden_dim)
  VitEncoder encoder;
  ModuleDict heads;  // "head": Linear(hidden_dim, num_classes)

 private:
  VisionTransformerOptions options_;
};

// ViT-B/16: 16 x 16 patches, 12 layers of 12 heads, hidden 768, MLP 3072; the image size
// (224 by default, a multiple of 16), classes, channels and dropouts come from `options`, as
// torchvision's keyword arguments.
std::shared_ptr<VisionTransformer> vit_b_16(const VisionTransformerOptions& options = {});

}  // namespace nabla::nn::models
