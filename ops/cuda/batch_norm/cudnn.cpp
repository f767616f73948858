// CUDA batch norm on cuDNN: the calls behind the cuDNN routes of batch_norm/routes.cpp.
//
// Note [cuDNN batch norm]
// x reaches us dense, contiguous or channels_last (the front end sees to it). Only channels_last
// (N, C, H, W) goes to cuDNN, described as NHWC, so nothing is transposed:
//  - Training, float64 only: the Ex API with bnOps CUDNN_BATCHNORM_OPS_BN in
//    CUDNN_BATCHNORM_SPATIAL mode. Its reserve space goes to the backward.
//  - Eval (float16/float32/float64): cudnnBatchNormalizationForwardInference,
//    CUDNN_BATCHNORM_SPATIAL (cuDNN has no eval backward; the front end writes that one with ops).
// cuDNN saves the batch mean and the inverse standard deviation, the same pair as nabla's
// kernels, and updates the running variance with the unbiased batch variance, as PyTorch does.
//
// Everything else runs on nabla's kernels (batch_norm/batch_norm.cu), which are faster than cuDNN's there:
// contiguous (NCHW and (N, C, *)) inputs, and channels_last training in float32, float16 and
// bfloat16, plain and fused with ReLU (+ add). cuDNN's NHWC training kernels (the
// SPATIAL_PERSISTENT mode and its fused BN_ACTIVATION ops) lost to nabla's over ResNet-50's batch
// norms in every dtype, so nabla does not call them. Also on nabla's kernels: bfloat16 eval
// (PyTorch's cuDNN path leaves bfloat16 out altogether), batches past cuDNN's limits
// (N > 880801 in training, > 65535 in eval), more than 2^31 elements, and any call cuDNN answers
// with a NOT_SUPPORTED status (checked before it runs anything), with the same results. Nothing
// is ever silently skipped: any other cuDNN status throws.
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <climits>

#include "nabla/core/cuda/check.h"
#include "nabla/core/cuda/device_guard.h"
#include "nabla/core/cuda/handles.h"
#include "nabla/ops/cuda/batch_norm/kernels.h"
#include "nabla/ops/cuda/cudnn/descriptors.h"
#include "nabla/ops/cuda/elementwise/kernels.h"

namespace nabla::ops::cuda {

namespace {

// True when cuDNN ran the call; false when it answered NOT_SUPPORTED (it then ran nothing).
// Any other failure throws.
bool ran(cudnnStatus_t status, const char* call, int line) {
  if (CUDNN_STATUS_CATEGORY(status) == CUDNN_STATUS_NOT_SUPPORTED) return false;
  nabla::cuda::check_cudnn(status, call, __FILE__, line);
  return true;
}
#define NABLA_CUDNN_RAN(call) ran((call), #call, __LINE__)

bool is_nhwc(const Tensor& x) {
  return x.dim() == 4 && !x.is_contiguous();
}

// The scaling factors cuDNN blends with: double for float64 data, float otherwise.
struct Blend {
  double one_d = 1.0, zero_d = 0.0;
  float one_f = 1.0f, zero_f = 0.0f;
  bool is_double;
  explicit Blend(DType dtype) : is_double(dtype == kFloat64) {}
  const void* one() const { return is_double ? static_cast<const void*>(&one_d) : &one_f; }
  const void* zero() const { return is_double ? static_cast<const void*>(&zero_d) : &zero_f; }
};

// The descriptors of one call: x (also y, dy, dx, z), always NHWC, and the per-channel tensors.
struct Descs {
  CudnnTensor x, param;
  Descs(const Tensor& t, cudnnBatchNormMode_t mode) {
    NABLA_ASSERT(is_nhwc(t), "cuDNN batch norm takes channels_last inputs only, got {}", describe(t));
    NABLA_CUDNN_CHECK(cudnnSetTensor4dDescriptor(x.get(), CUDNN_TENSOR_NHWC, cudnn_type(t.dtype()),
                                                 static_cast<int>(t.size(0)), static_cast<int>(t.size(1)),
                                                 static_cast<int>(t.size(2)), static_cast<int>(t.size(3))));
    NABLA_CUDNN_CHECK(cudnnDeriveBNTensorDescriptor(param.get(), x.get(), mode));
  }
};

void* ptr_or_null(const Tensor& t) {
  return t.defined() && t.numel() > 0 ? t.data_ptr() : nullptr;
}

Tensor bytes_on(const Tensor& like, size_t bytes) {
  return Tensor::empty({static_cast<int64_t>(bytes)}, {.dtype = kUInt8, .device = like.device()});
}

Tensor filled_params(const Tensor& x, DType dtype, double value) {
  Tensor t = Tensor::empty({x.size(1)}, {.dtype = dtype, .device = x.device()});
  fill(t, value);
  return t;
}

// weight and bias for cuDNN, which needs both: ones and zeros stand in for undefined ones.
std::pair<Tensor, Tensor> affine_params(const BatchNormInputs& in, DType param) {
  return {in.weight.defined() ? in.weight : filled_params(in.x, param, 1.0),
          in.bias.defined() ? in.bias : filled_params(in.x, param, 0.0)};
}

// The Ex training forward (OPS_BN, SPATIAL). Returns the reserve space, or nullopt when cuDNN
// does not support the configuration.
std::optional<Tensor> forward_ex(const BatchNormInputs& in, const Tensor& y, const BatchNormStats& stats,
                                 double momentum, double eps) {
  const Tensor& x = in.x;
  constexpr auto kMode = CUDNN_BATCHNORM_SPATIAL;
  constexpr auto kOps = CUDNN_BATCHNORM_OPS_BN;
  cudnnHandle_t handle = nabla::cuda::cudnn_handle();
  const Descs d(x, kMode);
  size_t workspace_bytes = 0, reserve_bytes = 0;
  if (!NABLA_CUDNN_RAN(cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize(
          handle, kMode, kOps, d.x.get(), nullptr, d.x.get(), d.param.get(), nullptr, &workspace_bytes)))
    return std::nullopt;
  if (!NABLA_CUDNN_RAN(cudnnGetBatchNormalizationTrainingExReserveSpaceSize(handle, kMode, kOps, nullptr,
                                                                            d.x.get(), &reserve_bytes)))
    return std::nullopt;
  Tensor workspace = bytes_on(x, workspace_bytes), reserve = bytes_on(x, reserve_bytes);
  const auto [w, b] = affine_params(in, stats.mean.dtype());
  const Blend blend(x.dtype());
  if (!NABLA_CUDNN_RAN(cudnnBatchNormalizationForwardTrainingEx(
          handle, kMode, kOps, blend.one(), blend.zero(), d.x.get(), x.data_ptr(), nullptr, nullptr,
          d.x.get(), y.data_ptr(), d.param.get(), w.data_ptr(), b.data_ptr(), momentum,
          ptr_or_null(in.running_mean), ptr_or_null(in.running_var), eps, stats.mean.data_ptr(),
          stats.invstd.data_ptr(), nullptr, ptr_or_null(workspace), workspace_bytes, ptr_or_null(reserve),
          reserve_bytes))) {
    return std::nullopt;
  }
  return reserve;
}

// Scratch (C) tensors for the gradients cuDNN always writes but the caller did not ask for.
BatchNormGrads with_all_param_grads(const BatchNormGrads& g, const Tensor& x, const BatchNormStats& stats) {
  BatchNormGrads all = g;
  const auto param_empty = [&] { return Tensor::empty({x.size(1)}, stats.mean.options()); };
  if (!all.dx.defined())
    all.dx = Tensor::empty(
        x.sizes(), {.dtype = x.dtype(), .device = x.device(), .memory_format = MemoryFormat::ChannelsLast});
  if (!all.dweight.defined()) all.dweight = param_empty();
  if (!all.dbias.defined()) all.dbias = param_empty();
  return all;
}

// The Ex backward (OPS_BN, SPATIAL). Returns false when not supported.
bool backward_ex(const Tensor& dy, const Tensor& x, const Tensor& weight, const BatchNormStats& stats,
                 const Tensor& reserve, double eps, const BatchNormGrads& g) {
  constexpr auto kMode = CUDNN_BATCHNORM_SPATIAL;
  constexpr auto kOps = CUDNN_BATCHNORM_OPS_BN;
  cudnnHandle_t handle = nabla::cuda::cudnn_handle();
  const Descs d(x, kMode);
  size_t workspace_bytes = 0;
  if (!NABLA_CUDNN_RAN(cudnnGetBatchNormalizationBackwardExWorkspaceSize(
          handle, kMode, kOps, d.x.get(), nullptr, d.x.get(), nullptr, d.x.get(), d.param.get(), nullptr,
          &workspace_bytes)))
    return false;
  Tensor workspace = bytes_on(x, workspace_bytes);
  const Blend blend(x.dtype());
  return NABLA_CUDNN_RAN(cudnnBatchNormalizationBackwardEx(
      handle, kMode, kOps, blend.one(), blend.zero(), blend.one(), blend.zero(), d.x.get(), x.data_ptr(),
      nullptr, nullptr, d.x.get(), dy.data_ptr(), nullptr, nullptr, d.x.get(), g.dx.data_ptr(), d.param.get(),
      weight.data_ptr(), nullptr, g.dweight.data_ptr(), g.dbias.data_ptr(), eps, stats.mean.data_ptr(),
      stats.invstd.data_ptr(), nullptr, ptr_or_null(workspace), workspace_bytes, ptr_or_null(reserve),
      reserve.defined() ? reserve.nbytes() : 0));
}

}  // namespace

// Shapes and dtypes cuDNN takes at all (see the Note); the rest goes to nabla's kernels.
bool cudnn_batch_norm_takes(const Tensor& x, bool training, double eps) {
  const int64_t limit = training ? 880801 : 65535;
  if (!is_nhwc(x)) return false;
  if (training && x.dtype() != kFloat64) return false;
  if (x.dtype() == kBFloat16) return false;
  if (x.size(0) > limit || x.numel() >= INT_MAX) return false;
  if (eps < CUDNN_BN_MIN_EPSILON) return false;
  return true;
}

std::optional<Tensor> cudnn_batch_norm_forward(const BatchNormInputs& in, const Tensor& y,
                                               const BatchNormStats& stats, double momentum, double eps) {
  nabla::cuda::DeviceGuard device(in.x.device().index);
  return forward_ex(in, y, stats, momentum, eps);
}

bool cudnn_batch_norm_inference(const BatchNormInputs& in, const Tensor& y, double eps) {
  const Tensor& x = in.x;
  nabla::cuda::DeviceGuard device(x.device().index);
  const Descs d(x, CUDNN_BATCHNORM_SPATIAL);
  const auto [w, b] = affine_params(in, in.running_mean.dtype());
  const Blend blend(x.dtype());
  return NABLA_CUDNN_RAN(cudnnBatchNormalizationForwardInference(
      nabla::cuda::cudnn_handle(), CUDNN_BATCHNORM_SPATIAL, blend.one(), blend.zero(), d.x.get(),
      x.data_ptr(), d.x.get(), y.data_ptr(), d.param.get(), w.data_ptr(), b.data_ptr(),
      in.running_mean.data_ptr(), in.running_var.data_ptr(), eps));
}

bool cudnn_batch_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight,
                               const BatchNormStats& stats, const Tensor& reserve, double eps,
                               const BatchNormGrads& grads) {
  nabla::cuda::DeviceGuard device(x.device().index);
  const BatchNormGrads g = with_all_param_grads(grads, x, stats);
  const Tensor w = weight.defined() ? weight : filled_params(x, stats.mean.dtype(), 1.0);
  return backward_ex(dy, x, w, stats, reserve, eps, g);
}

}  // namespace nabla::ops::cuda
