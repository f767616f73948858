// Public header. The standard layers. Each holds its parameters as public members (weight, bias,
// running_mean, ...) under PyTorch's names, and is initialized as PyTorch initializes it.
//
//   nn::Conv2d conv({.in = 3, .out = 64, .kernel = 7, .stride = 2, .padding = 3, .bias = false});
//   nn::BatchNorm2d bn(64);
//   nn::Linear fc({.in = 512, .out = 10});
//   auto y = fc(nn::Flatten()(pool(relu(bn(conv(x))))));
#pragma once

#include <cstdint>

#include "nabla/nn/module.h"
#include "nabla/ops/conv.h"
#include "nabla/ops/conv_bn.h"
#include "nabla/ops/elementwise.h"
#include "nabla/ops/interpolate.h"
#include "nabla/ops/linalg.h"
#include "nabla/ops/norm.h"
#include "nabla/ops/pixel_shuffle.h"
#include "nabla/ops/pool.h"

namespace nabla::nn {

struct LinearOptions {
  int64_t in = 0;
  int64_t out = 0;
  bool bias = true;
  TensorOptions tensor_options = {};  // dtype and device of the parameters
  // Applied to the output, fused into the product's epilogue on CUDA (linear's activation
  // argument, ops/linalg.h): Activation::gelu_tanh is gelu(y, {.tanh_approximation = true}).
  Activation activation = Activation::none;
};
// y = x W^T + b over the last dim: (*, in) -> (*, out). weight (out, in) and bias (out) start
// U(-1/sqrt(in), 1/sqrt(in)) (PyTorch's kaiming_uniform with a = sqrt(5)).
class Linear : public Module {
 public:
  explicit Linear(const LinearOptions& options);
  Tensor forward(const Tensor& x) override;
  Tensor weight, bias;

 private:
  LinearOptions options_;
};

struct Conv2dOptions {
  int64_t in = 0;
  int64_t out = 0;
  Pair2 kernel{0};
  Pair2 stride{1};
  Pair2 padding{0};
  Pair2 dilation{1};
  int64_t groups = 1;
  bool bias = true;
  TensorOptions tensor_options = {};
};
// (N, in, H, W) -> (N, out, Ho, Wo). weight (out, in / groups, kH, kW); initialized as PyTorch.
class Conv2d : public Module {
 public:
  explicit Conv2d(const Conv2dOptions& options);
  Tensor forward(const Tensor& x) override;
  const Conv2dOptions& options() const { return options_; }
  // The functional ops' options of this layer (stride, padding, dilation, groups).
  nabla::Conv2dOptions op_options() const;
  Tensor weight, bias;

 private:
  Conv2dOptions options_;
};

struct ConvTranspose2dOptions {
  int64_t in = 0;
  int64_t out = 0;
  Pair2 kernel{0};
  Pair2 stride{1};
  Pair2 padding{0};
  Pair2 output_padding{0};
  Pair2 dilation{1};
  int64_t groups = 1;
  bool bias = true;
  TensorOptions tensor_options = {};
};
// (N, in, H, W) -> (N, out, Ho, Wo), conv_transpose2d (ops/conv.h): the upsampling layer of
// decoders. weight (in, out / groups, kH, kW), bias (out); initialized as PyTorch's, whose
// state dicts load unchanged.
class ConvTranspose2d : public Module {
 public:
  explicit ConvTranspose2d(const ConvTranspose2dOptions& options);
  Tensor forward(const Tensor& x) override;
  const ConvTranspose2dOptions& options() const { return options_; }
  Tensor weight, bias;

 private:
  ConvTranspose2dOptions options_;
};

struct Conv1dOptions {
  int64_t in = 0;
  int64_t out = 0;
  int64_t kernel = 0;
  int64_t stride = 1;
  int64_t padding = 0;
  int64_t dilation = 1;
  int64_t groups = 1;
  bool bias = true;
  TensorOptions tensor_options = {};
};
// (N, in, L) or (in, L) -> (N, out, Lo). weight (out, in / groups, kernel); initialized as
// PyTorch (as Conv2d). PyTorch's Conv1d, its state dicts loading unchanged.
class Conv1d : public Module {
 public:
  explicit Conv1d(const Conv1dOptions& options);
  Tensor forward(const Tensor& x) override;
  const Conv1dOptions& options() const { return options_; }
  Tensor weight, bias;

 private:
  Conv1dOptions options_;
};

struct BatchNorm2dOptions {
  double eps = 1e-5;
  double momentum = 0.1;
  bool affine = true;               // learnable weight (1) and bias (0)
  bool track_running_stats = true;  // running_mean, running_var, num_batches_tracked buffers
  TensorOptions tensor_options = {};
};
// Per-channel normalization of (N, C, H, W): batch statistics in training (updating the running
// stats), running stats in eval (batch statistics always when not tracking).
class BatchNorm2d : public Module {
 public:
  explicit BatchNorm2d(int64_t num_features, const BatchNorm2dOptions& options = {});
  Tensor forward(const Tensor& x) override;
  // relu(forward(x)), fused where the backend can (inside a residual block and the stem).
  Tensor forward_relu(const Tensor& x);
  // relu(forward(x) + residual), fused where the backend can (the end of a residual block).
  Tensor forward_add_relu(const Tensor& x, const Tensor& residual);
  // next(relu(forward(y))) for a y whose per-channel sums the convolution that wrote it left
  // (conv_sums): in training, batch_norm_relu_conv2d, which fuses this layer into the
  // convolutions on either side where the backend can; otherwise the layers composed. `next`
  // must have no bias for the fused path. out_sums receives the result's sums.
  Tensor forward_relu_conv(const Tensor& y, const ChannelSums& sums, Conv2d& next,
                           ChannelSums* out_sums = nullptr);
  // forward(y), relu(forward(y)) (relu) or relu(forward(y) + residual) (relu and a residual)
  // for a y whose sums the convolution that wrote it left (conv_sums): in training,
  // batch_norm_from_sums, which takes the statistics from the sums and normalizes in one pass;
  // otherwise forward, forward_relu or forward_add_relu.
  Tensor forward_from_sums(const Tensor& y, const ChannelSums& sums, const Tensor& residual = {},
                           bool relu = false);
  // Whether fold_batch_norm moved this layer into a convolution: forward(x) is then x itself,
  // and forward_relu / forward_add_relu are the ReLU (and the sum) alone.
  bool folded() const { return folded_; }
  Tensor weight, bias, running_mean, running_var, num_batches_tracked;

 private:
  friend void fold_batch_norm(Conv2d& conv, BatchNorm2d& bn);
  BatchNormOptions batch_norm_options(const Tensor& x);
  int64_t num_features_;
  BatchNorm2dOptions options_;
  bool folded_ = false;
};

// Inference: folds bn, in eval mode, into the convolution before it. conv's weight is scaled per
// output channel by weight / sqrt(running_var + eps), its bias becomes the shift, and bn becomes
// the identity (folded()). The same function in real arithmetic; computed in float64, so the
// outputs agree with the unfolded layers to rounding. The layers must stay in eval mode (fold
// again after loading new weights); training the folded convolution is an error.
void fold_batch_norm(Conv2d& conv, BatchNorm2d& bn);
// conv(x) and, where the backend can and conv has no bias, its output's per-channel sums for the
// batch norm that reads it (conv2d_sums; BatchNorm2d::forward_relu_conv).
Tensor conv_sums(Conv2d& conv, const Tensor& x, ChannelSums* sums);
// relu(bn(conv(x)) [+ residual]): the fused batch norm + ReLU (+ add) kernels, or after
// fold_batch_norm one fused convolution call (conv2d_relu), whose output is written once.
Tensor conv_bn_relu(Conv2d& conv, BatchNorm2d& bn, const Tensor& x, const Tensor& residual = {});

struct LayerNormOptions {
  double eps = 1e-5;
  bool elementwise_affine = true;
  // Under autocast for the input's device, the result comes in autocast's lower-precision dtype
  // instead of float32 (layer_norm's dtype option): the same values a linear reading it would
  // cast to, without the cast. Right for pre-norm blocks, whose output feeds a linear; leave it off
  // where the output joins a float32 residual stream (post-norm).
  bool autocast_output = false;
  TensorOptions tensor_options = {};
};
struct GroupNormOptions {
  double eps = 1e-5;
  bool affine = true;  // weight 1 and bias 0, one per channel
  TensorOptions tensor_options = {};
};
// (N, C, *) in num_groups groups of channels, each (sample, group) normalized: group_norm
// (ops/norm.h). PyTorch's GroupNorm (weight, bias).
class GroupNorm : public Module {
 public:
  GroupNorm(int64_t num_groups, int64_t num_channels, const GroupNormOptions& options = {});
  Tensor forward(const Tensor& x) override;
  Tensor weight, bias;

 private:
  int64_t groups_;
  GroupNormOptions options_;
};

// interpolate (ops/interpolate.h) as a layer: a fixed output size or scale factor.
class Upsample : public Module {
 public:
  explicit Upsample(const InterpolateOptions& options);
  Tensor forward(const Tensor& x) override { return interpolate(x, options_); }

 private:
  InterpolateOptions options_;
};

// Normalizes over the trailing dims normalized_shape; weight 1 and bias 0 of that shape.
class LayerNorm : public Module {
 public:
  explicit LayerNorm(Shape normalized_shape, const LayerNormOptions& options = {});
  Tensor forward(const Tensor& x) override;
  // {x + y, forward(x + y)} through add_layer_norm (ops/norm.h): the residual add and this norm in
  // one pass each way on CUDA, as a pre-norm transformer chains them.
  AddNorm forward_add(const Tensor& x, const Tensor& y);
  Tensor weight, bias;

 private:
  Shape normalized_shape_;
  LayerNormOptions options_;
};

struct EmbeddingOptions {
  int64_t padding_idx = -1;  // a row kept at zero and never updated; -1 for none
  TensorOptions tensor_options = {};
};
// int64 indices (*) -> (*, dim); weight (num, dim) starts N(0, 1) (row padding_idx zero).
class Embedding : public Module {
 public:
  Embedding(int64_t num_embeddings, int64_t embedding_dim, const EmbeddingOptions& options = {});
  Tensor forward(const Tensor& indices) override;
  Tensor weight;

 private:
  EmbeddingOptions options_;
};

struct ReLUOptions {
  bool inplace = false;  // overwrite the input (relu_) instead of allocating the output
};
class ReLU : public Module {
 public:
  explicit ReLU(ReLUOptions options = {}) : options_(options) {}
  Tensor forward(const Tensor& x) override;

 private:
  ReLUOptions options_;
};

class GELU : public Module {
 public:
  explicit GELU(GeluOptions options = {}) : options_(options) {}
  Tensor forward(const Tensor& x) override { return gelu(x, options_); }

 private:
  GeluOptions options_;
};

class SiLU : public Module {
 public:
  Tensor forward(const Tensor& x) override { return silu(x); }
};

// The activations of mobile and vision models, as PyTorch names them (nabla::leaky_relu etc.).
class LeakyReLU : public Module {
 public:
  explicit LeakyReLU(double negative_slope = 0.01) : negative_slope_(negative_slope) {}
  Tensor forward(const Tensor& x) override { return leaky_relu(x, negative_slope_); }

 private:
  double negative_slope_;
};

class ELU : public Module {
 public:
  explicit ELU(double alpha = 1.0) : alpha_(alpha) {}
  Tensor forward(const Tensor& x) override { return elu(x, alpha_); }

 private:
  double alpha_;
};

class Hardswish : public Module {
 public:
  Tensor forward(const Tensor& x) override { return hardswish(x); }
};

class Hardsigmoid : public Module {
 public:
  Tensor forward(const Tensor& x) override { return hardsigmoid(x); }
};

class Softplus : public Module {
 public:
  explicit Softplus(double beta = 1.0, double threshold = 20.0) : beta_(beta), threshold_(threshold) {}
  Tensor forward(const Tensor& x) override { return softplus(x, beta_, threshold_); }

 private:
  double beta_, threshold_;
};

class Mish : public Module {
 public:
  Tensor forward(const Tensor& x) override { return mish(x); }
};

class MaxPool2d : public Module {
 public:
  explicit MaxPool2d(const MaxPool2dOptions& options) : options_(options) {}
  Tensor forward(const Tensor& x) override { return max_pool2d(x, options_); }

 private:
  MaxPool2dOptions options_;
};

class AvgPool2d : public Module {
 public:
  explicit AvgPool2d(const AvgPool2dOptions& options) : options_(options) {}
  Tensor forward(const Tensor& x) override { return avg_pool2d(x, options_); }

 private:
  AvgPool2dOptions options_;
};

class AdaptiveAvgPool2d : public Module {
 public:
  explicit AdaptiveAvgPool2d(PoolPair output_size) : output_size_(output_size) {}
  Tensor forward(const Tensor& x) override { return adaptive_avg_pool2d(x, output_size_); }

 private:
  PoolPair output_size_;
};

class AdaptiveMaxPool2d : public Module {
 public:
  explicit AdaptiveMaxPool2d(PoolPair output_size) : output_size_(output_size) {}
  Tensor forward(const Tensor& x) override { return adaptive_max_pool2d(x, output_size_); }

 private:
  PoolPair output_size_;
};

// Flattens dims start_dim..end_dim into one: (N, C, H, W) -> (N, C * H * W) by default.
class Flatten : public Module {
 public:
  explicit Flatten(int64_t start_dim = 1, int64_t end_dim = -1) : start_dim_(start_dim), end_dim_(end_dim) {}
  Tensor forward(const Tensor& x) override { return x.flatten(start_dim_, end_dim_); }

 private:
  int64_t start_dim_, end_dim_;
};

// Zeroes each element with probability p in training (scaling the rest by 1 / (1 - p)); the
// identity in eval.
class Dropout : public Module {
 public:
  explicit Dropout(double p = 0.5);
  Tensor forward(const Tensor& x) override;

 private:
  double p_;
};

// Zeroes whole channels of (N, C, H, W) (or (n, c) rows of (N, C, L)) with probability p in training (scaling
// the rest by 1 / (1 - p)); the identity in eval. PyTorch's Dropout2d.
class Dropout2d : public Module {
 public:
  explicit Dropout2d(double p = 0.5);
  Tensor forward(const Tensor& x) override;

 private:
  double p_;
};

// (*, C * r^2, H, W) -> (*, C, H * r, W * r), and the inverse (pixel_shuffle.h).
class PixelShuffle : public Module {
 public:
  explicit PixelShuffle(int64_t upscale_factor);
  Tensor forward(const Tensor& x) override { return pixel_shuffle(x, r_); }

 private:
  int64_t r_;
};
class PixelUnshuffle : public Module {
 public:
  explicit PixelUnshuffle(int64_t downscale_factor);
  Tensor forward(const Tensor& x) override { return pixel_unshuffle(x, r_); }

 private:
  int64_t r_;
};

class Identity : public Module {
 public:
  Tensor forward(const Tensor& x) override { return x; }
};

}  // namespace nabla::nn
