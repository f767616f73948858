// The standard layers: construction with PyTorch's default initialization, and forward.
#include "nabla/nn/layers.h"

#include <cmath>

#include "nabla/core/autocast.h"
#include "nabla/core/autograd/grad_mode.h"
#include "nabla/core/error.h"
#include "nabla/nn/init.h"
#include "nabla/ops/dropout.h"
#include "nabla/ops/embedding.h"
#include "nabla/ops/factory.h"
#include "nabla/ops/linalg.h"
#include "nabla/ops/norm.h"

namespace nabla::nn {

namespace {

// PyTorch's reset_parameters for Linear and Conv: kaiming_uniform(a = sqrt(5)) on the weight,
// which is U(-1/sqrt(fan_in), 1/sqrt(fan_in)), and the same bound for the bias.
void default_init(Tensor& weight, Tensor& bias) {
  init::kaiming_uniform_(weight, {.a = std::sqrt(5.0), .nonlinearity = init::Nonlinearity::leaky_relu});
  if (bias.defined()) {
    auto [fan_in, fan_out] = init::calculate_fan_in_and_fan_out(weight);
    double bound = fan_in > 0 ? 1.0 / std::sqrt(static_cast<double>(fan_in)) : 0.0;
    init::uniform_(bias, -bound, bound);
  }
}

}  // namespace

Linear::Linear(const LinearOptions& options) : options_(options) {
  NABLA_CHECK(options.in > 0 && options.out > 0, "Linear: in and out must be > 0, got in {}, out {}",
              options.in, options.out);
  weight = empty({options.out, options.in}, options.tensor_options);
  if (options.bias) bias = empty({options.out}, options.tensor_options);
  default_init(weight, bias);
  register_parameter("weight", weight);
  register_parameter("bias", bias);
}

Tensor Linear::forward(const Tensor& x) {
  return linear(x, weight, bias, options_.activation);
}

Conv2d::Conv2d(const Conv2dOptions& options) : options_(options) {
  NABLA_CHECK(options.in > 0 && options.out > 0 && options.groups > 0 && options.in % options.groups == 0 &&
                  options.out % options.groups == 0,
              "Conv2d: in ({}) and out ({}) must be > 0 and divisible by groups ({})", options.in,
              options.out, options.groups);
  NABLA_CHECK(options.kernel[0] > 0 && options.kernel[1] > 0, "Conv2d: kernel must be > 0, got ({}, {})",
              options.kernel[0], options.kernel[1]);
  weight = empty({options.out, options.in / options.groups, options.kernel[0], options.kernel[1]},
                 options.tensor_options);
  if (options.bias) bias = empty({options.out}, options.tensor_options);
  default_init(weight, bias);
  register_parameter("weight", weight);
  register_parameter("bias", bias);
}

ConvTranspose2d::ConvTranspose2d(const ConvTranspose2dOptions& options) : options_(options) {
  NABLA_CHECK(options.in > 0 && options.out > 0 && options.groups > 0 && options.in % options.groups == 0 &&
                  options.out % options.groups == 0,
              "ConvTranspose2d: in ({}) and out ({}) must be > 0 and divisible by groups ({})", options.in,
              options.out, options.groups);
  NABLA_CHECK(options.kernel[0] > 0 && options.kernel[1] > 0,
              "ConvTranspose2d: kernel must be > 0, got ({}, {})", options.kernel[0], options.kernel[1]);
  weight = empty({options.in, options.out / options.groups, options.kernel[0], options.kernel[1]},
                 options.tensor_options);
  if (options.bias) bias = empty({options.out}, options.tensor_options);
  // PyTorch's fan_in is weight.size(1) * kH * kW here too (out / groups), which default_init
  // computes the same way.
  default_init(weight, bias);
  register_parameter("weight", weight);
  register_parameter("bias", bias);
}

Tensor ConvTranspose2d::forward(const Tensor& x) {
  return conv_transpose2d(x, weight, bias,
                          {.stride = options_.stride,
                           .padding = options_.padding,
                           .output_padding = options_.output_padding,
                           .dilation = options_.dilation,
                           .groups = options_.groups});
}

Conv1d::Conv1d(const Conv1dOptions& options) : options_(options) {
  NABLA_CHECK(options.in > 0 && options.out > 0 && options.groups > 0 && options.in % options.groups == 0 &&
                  options.out % options.groups == 0,
              "Conv1d: in ({}) and out ({}) must be > 0 and divisible by groups ({})", options.in,
              options.out, options.groups);
  NABLA_CHECK(options.kernel > 0, "Conv1d: kernel must be > 0, got {}", options.kernel);
  weight = empty({options.out, options.in / options.groups, options.kernel}, options.tensor_options);
  if (options.bias) bias = empty({options.out}, options.tensor_options);
  default_init(weight, bias);
  register_parameter("weight", weight);
  register_parameter("bias", bias);
}

Tensor Conv1d::forward(const Tensor& x) {
  return conv1d(x, weight, bias,
                {.stride = options_.stride,
                 .padding = options_.padding,
                 .dilation = options_.dilation,
                 .groups = options_.groups});
}

nabla::Conv2dOptions Conv2d::op_options() const {
  return {.stride = options_.stride,
          .padding = options_.padding,
          .dilation = options_.dilation,
          .groups = options_.groups};
}

Tensor Conv2d::forward(const Tensor& x) {
  return conv2d(x, weight, bias, op_options());
}

BatchNorm2d::BatchNorm2d(int64_t num_features, const BatchNorm2dOptions& options)
    : num_features_(num_features), options_(options) {
  NABLA_CHECK(num_features > 0, "BatchNorm2d: num_features must be > 0, got {}", num_features);
  if (options.affine) {
    weight = ones({num_features}, options.tensor_options);
    bias = zeros({num_features}, options.tensor_options);
  }
  if (options.track_running_stats) {
    running_mean = zeros({num_features}, options.tensor_options);
    running_var = ones({num_features}, options.tensor_options);
    num_batches_tracked = zeros({}, {.dtype = kInt64, .device = options.tensor_options.device});
  }
  register_parameter("weight", weight);
  register_parameter("bias", bias);
  register_buffer("running_mean", running_mean);
  register_buffer("running_var", running_var);
  register_buffer("num_batches_tracked", num_batches_tracked);
}

// Checks x, counts the batch when it will update the running stats, and picks the statistics
// to use.
BatchNormOptions BatchNorm2d::batch_norm_options(const Tensor& x) {
  NABLA_CHECK(x.dim() == 4 && x.size(1) == num_features_,
              "BatchNorm2d({}): expected (N, {}, H, W) input, got {}", num_features_, num_features_,
              describe(x));
  bool use_batch_stats = is_training() || !options_.track_running_stats;
  if (is_training() && options_.track_running_stats) {
    NoGradGuard no_grad;
    num_batches_tracked.add_(1.0);
  }
  return {.training = use_batch_stats, .momentum = options_.momentum, .eps = options_.eps};
}

Tensor BatchNorm2d::forward(const Tensor& x) {
  if (folded_) return x;
  const BatchNormOptions o = batch_norm_options(x);
  return batch_norm(x, weight, bias, running_mean, running_var, o);
}

Tensor BatchNorm2d::forward_relu(const Tensor& x) {
  if (folded_) return relu(x);
  const BatchNormOptions o = batch_norm_options(x);
  return batch_norm_relu(x, weight, bias, running_mean, running_var, o);
}

Tensor BatchNorm2d::forward_add_relu(const Tensor& x, const Tensor& residual) {
  if (folded_) return relu(add(x, residual));
  const BatchNormOptions o = batch_norm_options(x);
  return batch_norm_add_relu(x, residual, weight, bias, running_mean, running_var, o);
}

Tensor BatchNorm2d::forward_relu_conv(const Tensor& y, const ChannelSums& sums, Conv2d& next,
                                      ChannelSums* out_sums) {
  if (out_sums) *out_sums = {};
  if (folded_ || next.bias.defined() || !is_training() || !next.is_training()) return next(forward_relu(y));
  const BatchNormOptions o = batch_norm_options(y);
  return batch_norm_relu_conv2d(y, sums, weight, bias, running_mean, running_var, o, next.weight,
                                next.op_options(), out_sums);
}

Tensor BatchNorm2d::forward_from_sums(const Tensor& y, const ChannelSums& sums, const Tensor& residual,
                                      bool relu) {
  NABLA_CHECK(
      relu || !residual.defined(),
      "BatchNorm2d::forward_from_sums: a residual is added before the ReLU; pass relu = true with it");
  if (folded_ || !is_training()) {
    if (residual.defined()) return forward_add_relu(y, residual);
    return relu ? forward_relu(y) : forward(y);
  }
  const BatchNormOptions o = batch_norm_options(y);
  return batch_norm_from_sums(y, sums, residual, relu, weight, bias, running_mean, running_var, o);
}

Tensor conv_sums(Conv2d& conv, const Tensor& x, ChannelSums* sums) {
  NABLA_CHECK(sums != nullptr, "conv_sums: sums must not be null");
  *sums = {};
  if (conv.bias.defined() || !conv.is_training()) return conv(x);
  return conv2d_sums(x, conv.weight, conv.op_options(), sums);
}

void fold_batch_norm(Conv2d& conv, BatchNorm2d& bn) {
  NABLA_CHECK(!bn.folded_, "fold_batch_norm: this BatchNorm2d is folded already");
  NABLA_CHECK(!bn.is_training() && !conv.is_training(),
              "fold_batch_norm: put the layers in eval mode first (model->eval()): folding uses the running "
              "statistics, which training would go on changing");
  NABLA_CHECK(bn.running_mean.defined() && bn.running_var.defined(),
              "fold_batch_norm: the BatchNorm2d has no running statistics (track_running_stats = false), "
              "so there is nothing fixed to fold");
  const int64_t channels = conv.weight.size(0);
  NABLA_CHECK(bn.running_mean.numel() == channels,
              "fold_batch_norm: the convolution has {} output channels, the BatchNorm2d {}", channels,
              bn.running_mean.numel());
  NoGradGuard no_grad;
  // scale = gamma / sqrt(var + eps), shift = beta + (conv bias - mean) * scale, in float64.
  const auto f64 = [](const Tensor& t) { return t.to(kFloat64); };
  Tensor scale = rsqrt(add(f64(bn.running_var), bn.options_.eps));
  if (bn.weight.defined()) scale = mul(scale, f64(bn.weight));
  Tensor centered = neg(f64(bn.running_mean));
  if (conv.bias.defined()) centered = add(centered, f64(conv.bias));
  Tensor shift = mul(centered, scale);
  if (bn.bias.defined()) shift = add(shift, f64(bn.bias));
  conv.weight.copy_(mul(f64(conv.weight), scale.reshape({channels, 1, 1, 1})));
  if (conv.bias.defined()) {
    conv.bias.copy_(shift);
  } else {
    conv.bias = shift.to(conv.weight.dtype()).requires_grad_(conv.weight.requires_grad());
  }
  bn.folded_ = true;
}

Tensor conv_bn_relu(Conv2d& conv, BatchNorm2d& bn, const Tensor& x, const Tensor& residual) {
  if (!bn.folded())
    return residual.defined() ? bn.forward_add_relu(conv(x), residual) : bn.forward_relu(conv(x));
  NABLA_CHECK(
      !conv.is_training(),
      "conv_bn_relu: the batch norm was folded into the convolution for inference; training it is not "
      "supported (reload the unfolded weights to train)");
  return conv2d_relu(x, conv.weight, conv.bias, {.residual = residual}, conv.op_options());
}

LayerNorm::LayerNorm(Shape normalized_shape, const LayerNormOptions& options)
    : normalized_shape_(std::move(normalized_shape)), options_(options) {
  NABLA_CHECK(!normalized_shape_.empty(), "LayerNorm: normalized_shape must not be empty");
  if (options.elementwise_affine) {
    weight = ones(normalized_shape_, options.tensor_options);
    bias = zeros(normalized_shape_, options.tensor_options);
  }
  register_parameter("weight", weight);
  register_parameter("bias", bias);
}

namespace {

// The result dtype of a LayerNorm: autocast's lower dtype when asked for and autocast is on for
// x's device, else layer_norm's default.
std::optional<DType> output_dtype(const LayerNormOptions& options, const Tensor& x) {
  if (!options.autocast_output || !x.defined()) return std::nullopt;
  const autocast::State state = autocast::current();
  if (state.enabled && state.device_type == x.device().type) return state.dtype;
  return std::nullopt;
}

}  // namespace

Tensor LayerNorm::forward(const Tensor& x) {
  return layer_norm(x, normalized_shape_, weight, bias,
                    {.eps = options_.eps, .dtype = output_dtype(options_, x)});
}

AddNorm LayerNorm::forward_add(const Tensor& x, const Tensor& y) {
  return add_layer_norm(x, y, normalized_shape_, weight, bias,
                        {.eps = options_.eps, .dtype = output_dtype(options_, x)});
}

Embedding::Embedding(int64_t num_embeddings, int64_t embedding_dim, const EmbeddingOptions& options)
    : options_(options) {
  NABLA_CHECK(num_embeddings > 0 && embedding_dim > 0, "Embedding: sizes must be > 0, got ({}, {})",
              num_embeddings, embedding_dim);
  NABLA_CHECK(options.padding_idx >= -1 && options.padding_idx < num_embeddings,
              "Embedding: padding_idx {} must be -1 or in [0, {})", options.padding_idx, num_embeddings);
  weight = empty({num_embeddings, embedding_dim}, options.tensor_options);
  init::normal_(weight);
  if (options.padding_idx >= 0) {
    NoGradGuard no_grad;
    weight.select(0, options.padding_idx).zero_();
  }
  register_parameter("weight", weight);
}

Tensor Embedding::forward(const Tensor& indices) {
  return embedding(weight, indices, {.padding_idx = options_.padding_idx});
}

Tensor ReLU::forward(const Tensor& x) {
  if (!options_.inplace) return relu(x);
  Tensor y = x;  // shares x's storage: relu_ overwrites the caller's tensor, as inplace asks
  relu_(y);
  return y;
}

Dropout::Dropout(double p) : p_(p) {
  NABLA_CHECK(p >= 0 && p < 1, "Dropout: p must be in [0, 1), got {}", p);
}

Tensor Dropout::forward(const Tensor& x) {
  return dropout(x, {.p = p_, .training = is_training()});
}

GroupNorm::GroupNorm(int64_t num_groups, int64_t num_channels, const GroupNormOptions& options)
    : groups_(num_groups), options_(options) {
  NABLA_CHECK(num_groups > 0 && num_channels > 0 && num_channels % num_groups == 0,
              "GroupNorm: num_groups ({}) must be > 0 and divide num_channels ({})", num_groups,
              num_channels);
  if (options.affine) {
    weight = ones({num_channels}, options.tensor_options);
    bias = zeros({num_channels}, options.tensor_options);
  }
  register_parameter("weight", weight);
  register_parameter("bias", bias);
}

Tensor GroupNorm::forward(const Tensor& x) {
  return group_norm(x, groups_, weight, bias, options_.eps);
}

Upsample::Upsample(const InterpolateOptions& options) : options_(options) {
  NABLA_CHECK(options.size.has_value() != options.scale_factor.has_value(),
              "Upsample: give exactly one of size and scale_factor");
}

Dropout2d::Dropout2d(double p) : p_(p) {
  NABLA_CHECK(p >= 0 && p < 1, "Dropout2d: p must be in [0, 1), got {}", p);
}

Tensor Dropout2d::forward(const Tensor& x) {
  return dropout2d(x, {.p = p_, .training = is_training()});
}

PixelShuffle::PixelShuffle(int64_t upscale_factor) : r_(upscale_factor) {
  NABLA_CHECK(upscale_factor > 0, "PixelShuffle: upscale_factor must be > 0, got {}", upscale_factor);
}

PixelUnshuffle::PixelUnshuffle(int64_t downscale_factor) : r_(downscale_factor) {
  NABLA_CHECK(downscale_factor > 0, "PixelUnshuffle: downscale_factor must be > 0, got {}", downscale_factor);
}

}  // namespace nabla::nn
