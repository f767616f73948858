// Public header. Batch normalization (plain, and fused with ReLU or with a residual add and ReLU)
// and layer and RMS normalization.
//
//   nabla::Tensor y = nabla::batch_norm(x, w, b, running_mean, running_var, {.training = true});
//   nabla::Tensor z = nabla::batch_norm_add_relu(x, shortcut, w, b, running_mean, running_var);
//   nabla::Tensor h = nabla::layer_norm(x, {768}, gamma, beta);
//   nabla::Tensor r = nabla::rms_norm(x, {768}, gamma, {.eps = 1e-6});
//
// batch_norm takes x of shape (N, C) or (N, C, *) and normalizes each channel over every other
// dim. In training it uses the batch statistics and, when running stats are given, updates them
// in place (outside autograd): running = (1 - momentum) * running + momentum * batch, with the
// unbiased batch variance, as PyTorch does. In eval it uses the running stats. Weight, bias and
// running stats are (C) tensors of the parameter dtype: float32 for float16/bfloat16 x (whose
// math also runs in float32), x's dtype otherwise; weight and bias may be undefined (affine off),
// and running stats may be undefined in training (no tracking). A channels_last x gives a
// channels_last result.
//
// On CUDA, training batch norm runs on nabla's own kernels for contiguous input and for
// channels_last float32/float16/bfloat16, and on cuDNN for channels_last float64; eval runs on
// cuDNN for channels_last float16/float32/float64 (Note [cuDNN batch norm] in
// ops/cuda/batch_norm/cudnn.cpp). In training the fused variants run as one pass on nabla's
// kernels (ReLU and add in the normalizing pass, the mask in the backward). Elsewhere (eval, the
// CPU, float64) they compose batch_norm, add and relu, with the same results.
#pragma once

#include <optional>

#include "nabla/core/tensor.h"

namespace nabla {

struct BatchNormOptions {
  bool training = true;
  double momentum = 0.1;  // weight of the batch statistics in the running-stat update
  double eps = 1e-5;      // added to the variance; must be > 0
};

Tensor batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& running_mean,
                  Tensor& running_var, BatchNormOptions options = {});

// relu(batch_norm(x, ...)).
Tensor batch_norm_relu(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& running_mean,
                       Tensor& running_var, BatchNormOptions options = {});

// relu(batch_norm(x, ...) + residual); residual has x's shape and dtype.
Tensor batch_norm_add_relu(const Tensor& x, const Tensor& residual, const Tensor& weight, const Tensor& bias,
                           Tensor& running_mean, Tensor& running_var, BatchNormOptions options = {});

// Normalizes over the trailing dims given by normalized_shape (which must match x's last dims):
// y = (x - mean) / sqrt(var + eps) * weight + bias, with the biased variance. weight and bias
// have shape normalized_shape and x's dtype, or are undefined. Float16/bfloat16 compute in
// float32. The result is contiguous.
// dtype: the result's dtype (default x's, float32 under autocast). A lower precision than x's
// gives exactly layer_norm(x).to(dtype), forward and backward, in one pass: on CUDA a float32 x
// with a float16/bfloat16 result is one kernel each way (the cast and its backward vanish), as a
// pre-norm transformer wants for the linear that reads the result. rms_norm takes it too.
struct LayerNormOptions {
  double eps = 1e-5;  // added to the variance, > 0
  std::optional<DType> dtype = {};
};
Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight = {},
                  const Tensor& bias = {}, LayerNormOptions options = {});

// Residual add, then layer norm: what ends a pre-norm transformer's sub-block and starts the next.
//   auto [h, z] = add_layer_norm(x, attn_out, {C}, ln.weight, ln.bias);  // h = x + attn_out, z = LN(h)
// Differentiable in x, y, weight and bias, with the values of `h = x + y; z = layer_norm(h, ...)`
// (options.dtype applies to z). On CUDA, a float32 x with a float32/float16/bfloat16 y of the same
// shape, both contiguous, runs as one kernel each way when the rows suit the vectorized layer-norm
// kernels: the forward writes h and z from one read of x and y, and the backward adds the gradient
// that reached h directly into the norm's input gradient and writes it for y too, where the
// composition would run an add, a norm, an accumulation and a cast. Elsewhere it is the composition.
struct AddNorm {
  Tensor sum;         // x + y
  Tensor normalized;  // layer_norm(sum)
};
AddNorm add_layer_norm(const Tensor& x, const Tensor& y, const Shape& normalized_shape,
                       const Tensor& weight = {}, const Tensor& bias = {}, LayerNormOptions options = {});

// Root-mean-square normalization over the trailing dims, as torch.nn.functional.rms_norm:
// y = x / sqrt(mean(x^2) + eps) * weight. weight has shape normalized_shape and x's dtype, or is
// undefined. Float16/bfloat16 compute in float32. It runs on layer norm's kernels without the
// centring (one fused kernel per pass on each backend).
struct RMSNormOptions {
  std::optional<double> eps;  // > 0; default: float32's machine epsilon (float64's for float64), as PyTorch
  std::optional<DType> dtype = {};  // the result's dtype, as LayerNormOptions::dtype
};
Tensor rms_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight = {},
                RMSNormOptions options = {});

// Group normalization (torch.nn.functional.group_norm): x (N, C, *) split into `groups` groups of
// C / groups channels, each (n, group) normalized over its channels and positions with the
// biased variance, then weight and bias (C) per channel when defined. It is layer_norm over each
// (n, group) (the fused layer-norm kernels on either backend, float32 statistics for 16-bit x)
// and one affine pass; the result keeps x's layout.
Tensor group_norm(const Tensor& x, int64_t groups, const Tensor& weight = {}, const Tensor& bias = {},
                  double eps = 1e-5);

}  // namespace nabla
