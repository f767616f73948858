// Internal. The CUDA batch-norm family: its routes (routes.cpp), nabla's kernels (batch_norm.cu)
// and cuDNN's calls (cudnn.cpp), in plain C++ so tests and benchmarks compile without nvcc.
// Front ends reach the family through its seam (ops/detail/batch_norm.h), never through this
// header. Same tensor contracts as the seam's. Everything runs on the current stream of x's
// device and never synchronizes.
#pragma once

#include <cstdint>
#include <optional>
#include <span>

#include "nabla/core/tensor.h"
#include "nabla/ops/detail/batch_norm.h"

namespace nabla::ops::cuda {

// Every implementation of a CUDA batch norm. A training forward reports its route in
// BatchNormSaved::route, and the backward takes the same one.
enum class BatchNormRoute : uint8_t {
  // Training on nabla's kernels: plain, or relu(bn(x) + z) whose backward reads the ReLU's mask
  // from the saved output.
  Kernels = 0,
  // relu(bn(x)) on nabla's kernels, whose backward recomputes the mask from x (Note [The ReLU's
  // mask from x] in batch_norm/batch_norm.cu) instead of keeping the output.
  KernelsReluMaskFromX,
  CudnnEx,           // training on cuDNN's Ex API (channels_last float64); the reserve goes to backward
  KernelsInference,  // eval on nabla's kernels
  CudnnInference,    // eval on cuDNN (channels_last float16/float32/float64)
};

// The routes, for tests that must run each; and a route's name.
std::span<const BatchNormRoute> batch_norm_routes();
const char* route_name(BatchNormRoute route);

// The route table (routes.cpp): the implementation a call of x takes. A cuDNN route falls back
// to the kernels at run time only where cuDNN answers NOT_SUPPORTED.
BatchNormRoute batch_norm_route(const Tensor& x, bool training, bool relu, bool add, double eps);

// nabla's own kernels. The forward adds z (defined: x's shape and layout) and/or applies a ReLU;
// the backward takes that ReLU's output y as relu_y (the gradient is masked where y <= 0) and
// writes the masked gradient to grads.dresidual when that is defined. Or, for relu(bn(x)) whose
// forward ran on batch_norm_forward_kernel, it recomputes the mask from x (mask_from_x.on;
// relu_y and grads.dresidual undefined), which takes the batch norm's bias too (undefined: zeros).
struct ReluMaskFromX {
  bool on = false;
  Tensor bias;
};
void batch_norm_forward_kernel(const BatchNormInputs& in, const Tensor& y, const BatchNormStats& stats,
                               double momentum, double eps, const Tensor& z = {}, bool relu = false);
void batch_norm_inference_kernel(const BatchNormInputs& in, const Tensor& y, double eps);
void batch_norm_backward_kernel(const Tensor& dy, const Tensor& x, const Tensor& weight,
                                const BatchNormStats& stats, const BatchNormGrads& grads,
                                const Tensor& relu_y = {}, const ReluMaskFromX& mask_from_x = {});

// cuDNN's calls (Note [cuDNN batch norm] in batch_norm/cudnn.cpp). Whether cuDNN takes x at all;
// then each returns false (nullopt) where cuDNN answers NOT_SUPPORTED, having run nothing.
bool cudnn_batch_norm_takes(const Tensor& x, bool training, double eps);
// The training forward; returns its reserve space for the backward.
std::optional<Tensor> cudnn_batch_norm_forward(const BatchNormInputs& in, const Tensor& y,
                                               const BatchNormStats& stats, double momentum, double eps);
bool cudnn_batch_norm_inference(const BatchNormInputs& in, const Tensor& y, double eps);
bool cudnn_batch_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight,
                               const BatchNormStats& stats, const Tensor& reserve, double eps,
                               const BatchNormGrads& grads);

}  // namespace nabla::ops::cuda
