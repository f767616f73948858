// CUDA batch norm on cuDNN, and the choice between cuDNN and nabla's own kernels.
//
// Note [cuDNN batch norm]
// x reaches us dense, contiguous or channels_last (the front end sees to it). Only channels_last
// (N, C, H, W) goes to cuDNN, described as NHWC, so nothing is transposed:
//  - Training: the Ex API with bnOps CUDNN_BATCHNORM_OPS_BN, in CUDNN_BATCHNORM_SPATIAL mode
//    for float64, and in CUDNN_BATCHNORM_SPATIAL_PERSISTENT mode (cuDNN's NHWC kernels) for
//    float16/bfloat16 when set_cudnn_batch_norm_training is on (off by default, below). Its
//    reserve space goes to the backward.
//  - Eval (float16/float32/float64): cudnnBatchNormalizationForwardInference,
//    CUDNN_BATCHNORM_SPATIAL (cuDNN has no eval backward; the front end writes that one with ops).
//  - Fused (batch_norm_relu / batch_norm_add_relu, channels_last float16/bfloat16 with the
//    switch on, training):
//    the Ex API in SPATIAL_PERSISTENT mode with bnOps BN_ACTIVATION or BN_ADD_ACTIVATION and a
//    ReLU activation descriptor; workspace and reserve sizes come from the matching Get*Size
//    calls.
// cuDNN saves the batch mean and the inverse standard deviation, the same pair as nabla's
// kernels, and updates the running variance with the unbiased batch variance, as PyTorch does.
//
// Where cuDNN does not go: contiguous (NCHW and (N, C, *)) inputs, whose cuDNN kernels
// (cudnnBatchNormalizationForwardTraining / Backward / ForwardInference) nabla's own are faster
// than: ResNet-50 training on an H200, batch 256, went from 117.8 to 99.8 ms per step in float32
// and from 85.4 to 60.7 ms in float16 when they moved (docs/performance.md, session 6). Also
// channels_last training in float32 (since session 7) and, since session 23, in float16 and
// bfloat16, plain and fused. Until then cuDNN's semi-persistent NHWC kernels were faster in
// 16-bit; session 23 found what held nabla's kernels back there: elementwise threads that loaded
// up to 56 coefficients for 4 vectors of data, partial sums spread over four waves of blocks,
// and finishing warps that added hundreds of partials through one chain of L2 round trips
// (about 10 us per layer). Without those, the bfloat16 ResNet-50 step went from 34.66 ms on
// cuDNN to 32.0 ms on nabla's kernels (docs/performance.md, session 23). cuDNN's route
// stays behind set_cudnn_batch_norm_training, for comparison. Also
// bfloat16 eval (PyTorch's cuDNN path leaves bfloat16 out altogether), batches past cuDNN's
// limits (N > 880801 in training, > 65535 in eval), more than 2^31 elements, and any call cuDNN
// answers with a NOT_SUPPORTED status (checked before it runs anything). Those run on nabla's
// kernels (batch_norm.cu) with the same results; a fused call that cuDNN refuses is composed
// from the unfused ops by the front end. Nothing is ever silently skipped: any other cuDNN
// status throws.
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <atomic>
#include <climits>

#include "nabla/core/cuda/check.h"
#include "nabla/core/cuda/device_guard.h"
#include "nabla/core/cuda/handles.h"
#include "nabla/ops/cuda/cudnn_descriptors.h"
#include "nabla/ops/cuda/kernels.h"
#include "nabla/ops/cuda/norm_kernels.h"

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

std::atomic<bool> cudnn_training_on{false};

// float32, float16 and bfloat16 channels_last training runs on nabla's kernels, which beat
// cuDNN's NHWC kernels there (see the Note), unless set_cudnn_batch_norm_training sends the
// 16-bit ones back; float64 stays on cuDNN.
bool training_on_kernels(const Tensor& x) {
  if (x.dtype() == kFloat32 || persistent_batch_norm_takes(x)) return true;
  const bool half = x.dtype() == kFloat16 || x.dtype() == kBFloat16;
  return half && !cudnn_training_on.load(std::memory_order_relaxed);
}

// Shapes and dtypes cuDNN takes at all (see the Note); the rest goes to nabla's kernels.
bool cudnn_can_take(const Tensor& x, bool training, double eps) {
  const int64_t limit = training ? 880801 : 65535;
  if (!is_nhwc(x)) return false;
  if (training && training_on_kernels(x)) return false;
  // bfloat16 goes only to the NHWC training kernels (the Ex API), which cuDNN runs at float16's
  // speed.
  if (x.dtype() == kBFloat16 && !training) return false;
  if (x.size(0) > limit || x.numel() >= INT_MAX) return false;
  if (eps < CUDNN_BN_MIN_EPSILON) return false;
  return true;
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

// The Ex training forward (OPS_BN, or a fused op when `act` is given). Returns the reserve
// space, or nullopt when cuDNN does not support the configuration.
std::optional<Tensor> forward_ex(const BatchNormInputs& in, const Tensor& z, const Tensor& y,
                                 const BatchNormStats& stats, double momentum, double eps,
                                 cudnnBatchNormMode_t mode, cudnnBatchNormOps_t ops,
                                 const ReluDescriptor* act) {
  const Tensor& x = in.x;
  cudnnHandle_t handle = nabla::cuda::cudnn_handle();
  const Descs d(x, mode);
  const cudnnTensorDescriptor_t z_desc = z.defined() ? d.x.get() : nullptr;
  const cudnnActivationDescriptor_t act_desc = act ? act->get() : nullptr;
  size_t workspace_bytes = 0, reserve_bytes = 0;
  // A configuration cuDNN cannot run can also show up as BAD_PARAM in the size queries.
  cudnnStatus_t status = cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize(
      handle, mode, ops, d.x.get(), z_desc, d.x.get(), d.param.get(), act_desc, &workspace_bytes);
  if (status == CUDNN_STATUS_BAD_PARAM && act) return std::nullopt;
  if (!NABLA_CUDNN_RAN(status)) return std::nullopt;
  status = cudnnGetBatchNormalizationTrainingExReserveSpaceSize(handle, mode, ops, act_desc, d.x.get(),
                                                                &reserve_bytes);
  if (status == CUDNN_STATUS_BAD_PARAM && act) return std::nullopt;
  if (!NABLA_CUDNN_RAN(status)) return std::nullopt;
  Tensor workspace = bytes_on(x, workspace_bytes), reserve = bytes_on(x, reserve_bytes);
  const auto [w, b] = affine_params(in, stats.mean.dtype());
  const Blend blend(x.dtype());
  if (!NABLA_CUDNN_RAN(cudnnBatchNormalizationForwardTrainingEx(
          handle, mode, ops, blend.one(), blend.zero(), d.x.get(), x.data_ptr(), z_desc, ptr_or_null(z),
          d.x.get(), y.data_ptr(), d.param.get(), w.data_ptr(), b.data_ptr(), momentum,
          ptr_or_null(in.running_mean), ptr_or_null(in.running_var), eps, stats.mean.data_ptr(),
          stats.invstd.data_ptr(), act_desc, ptr_or_null(workspace), workspace_bytes, ptr_or_null(reserve),
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

// The Ex backward; y, bias and dz only for the fused ops. Returns false when not supported.
bool backward_ex(const Tensor& dy, const Tensor& x, const Tensor& y, const Tensor& weight, const Tensor& bias,
                 const BatchNormStats& stats, const Tensor& reserve, double eps, cudnnBatchNormMode_t mode,
                 cudnnBatchNormOps_t ops, const ReluDescriptor* act, const BatchNormGrads& g) {
  cudnnHandle_t handle = nabla::cuda::cudnn_handle();
  const Descs d(x, mode);
  const cudnnTensorDescriptor_t y_desc = y.defined() ? d.x.get() : nullptr;
  const cudnnTensorDescriptor_t dz_desc = g.dresidual.defined() ? d.x.get() : nullptr;
  const cudnnActivationDescriptor_t act_desc = act ? act->get() : nullptr;
  size_t workspace_bytes = 0;
  if (!NABLA_CUDNN_RAN(cudnnGetBatchNormalizationBackwardExWorkspaceSize(
          handle, mode, ops, d.x.get(), y_desc, d.x.get(), dz_desc, d.x.get(), d.param.get(), act_desc,
          &workspace_bytes))) {
    return false;
  }
  Tensor workspace = bytes_on(x, workspace_bytes);
  const Blend blend(x.dtype());
  return NABLA_CUDNN_RAN(cudnnBatchNormalizationBackwardEx(
      handle, mode, ops, blend.one(), blend.zero(), blend.one(), blend.zero(), d.x.get(), x.data_ptr(),
      y_desc, ptr_or_null(y), d.x.get(), dy.data_ptr(), dz_desc, ptr_or_null(g.dresidual), d.x.get(),
      g.dx.data_ptr(), d.param.get(), weight.data_ptr(), ptr_or_null(bias), g.dweight.data_ptr(),
      g.dbias.data_ptr(), eps, stats.mean.data_ptr(), stats.invstd.data_ptr(), act_desc,
      ptr_or_null(workspace), workspace_bytes, ptr_or_null(reserve),
      reserve.defined() ? reserve.nbytes() : 0));
}

}  // namespace

BatchNormForward batch_norm_forward(const BatchNormInputs& in, const Tensor& y, const BatchNormStats& stats,
                                    double momentum, double eps) {
  const Tensor& x = in.x;
  if (cudnn_can_take(x, /*training=*/true, eps)) {
    nabla::cuda::DeviceGuard device(x.device().index);
    // Persistent first where the dtype allows it, then plain spatial.
    for (bool persistent : {x.dtype() != kFloat64, false}) {
      const auto mode = persistent ? CUDNN_BATCHNORM_SPATIAL_PERSISTENT : CUDNN_BATCHNORM_SPATIAL;
      std::optional<Tensor> reserve =
          forward_ex(in, Tensor(), y, stats, momentum, eps, mode, CUDNN_BATCHNORM_OPS_BN, nullptr);
      if (reserve) return {.impl = BatchNormImpl::CudnnEx, .reserve = *reserve, .persistent = persistent};
      if (!persistent) break;
    }
  }
  batch_norm_forward_kernel(in, y, stats, momentum, eps);
  return {.impl = BatchNormImpl::Kernel, .reserve = Tensor(), .persistent = false};
}

void batch_norm_inference(const BatchNormInputs& in, const Tensor& y, double eps) {
  const Tensor& x = in.x;
  if (x.numel() == 0) return;
  if (cudnn_can_take(x, /*training=*/false, eps)) {
    nabla::cuda::DeviceGuard device(x.device().index);
    const Descs d(x, CUDNN_BATCHNORM_SPATIAL);
    const auto [w, b] = affine_params(in, in.running_mean.dtype());
    const Blend blend(x.dtype());
    if (NABLA_CUDNN_RAN(cudnnBatchNormalizationForwardInference(
            nabla::cuda::cudnn_handle(), CUDNN_BATCHNORM_SPATIAL, blend.one(), blend.zero(), d.x.get(),
            x.data_ptr(), d.x.get(), y.data_ptr(), d.param.get(), w.data_ptr(), b.data_ptr(),
            in.running_mean.data_ptr(), in.running_var.data_ptr(), eps))) {
      return;
    }
  }
  batch_norm_inference_kernel(in, y, eps);
}

void batch_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const BatchNormStats& stats,
                         const BatchNormForward& forward, double eps, const BatchNormGrads& grads) {
  NABLA_ASSERT(forward.impl != BatchNormImpl::KernelReluFromX,
               "batch_norm_backward: a fused ReLU forward goes to batch_norm_fused_backward");
  if (!on_kernels(forward.impl)) {
    nabla::cuda::DeviceGuard device(x.device().index);
    const BatchNormGrads g = with_all_param_grads(grads, x, stats);
    const Tensor w = weight.defined() ? weight : filled_params(x, stats.mean.dtype(), 1.0);
    const auto mode = forward.persistent ? CUDNN_BATCHNORM_SPATIAL_PERSISTENT : CUDNN_BATCHNORM_SPATIAL;
    if (backward_ex(dy, x, Tensor(), w, Tensor(), stats, forward.reserve, eps, mode, CUDNN_BATCHNORM_OPS_BN,
                    nullptr, g)) {
      return;
    }
  }
  // The saved mean and inverse std are the same pair whichever path made them.
  batch_norm_backward_kernel(dy, x, weight, stats, grads);
}

void set_cudnn_batch_norm_training(bool on) {
  cudnn_training_on.store(on, std::memory_order_relaxed);
}

bool cudnn_batch_norm_training() {
  return cudnn_training_on.load(std::memory_order_relaxed);
}

std::optional<BatchNormForward> batch_norm_fused_forward(const BatchNormInputs& in, const Tensor& z,
                                                         const Tensor& y, const BatchNormStats& stats,
                                                         double momentum, double eps) {
  const Tensor& x = in.x;
  if (!is_nhwc(x) || training_on_kernels(x)) {
    batch_norm_forward_kernel(in, y, stats, momentum, eps, z, /*relu=*/true);
    return BatchNormForward{.impl = z.defined() ? BatchNormImpl::Kernel : BatchNormImpl::KernelReluFromX,
                            .reserve = Tensor(),
                            .persistent = false};
  }
  return batch_norm_fused_forward_cudnn(in, z, y, stats, momentum, eps);
}

std::optional<BatchNormForward> batch_norm_fused_forward_cudnn(const BatchNormInputs& in, const Tensor& z,
                                                               const Tensor& y, const BatchNormStats& stats,
                                                               double momentum, double eps) {
  const Tensor& x = in.x;
  if (!is_nhwc(x) || x.size(0) > 880801 || x.numel() >= INT_MAX || eps < CUDNN_BN_MIN_EPSILON)
    return std::nullopt;
  nabla::cuda::DeviceGuard device(x.device().index);
  const ReluDescriptor relu;
  const auto ops = z.defined() ? CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION : CUDNN_BATCHNORM_OPS_BN_ACTIVATION;
  std::optional<Tensor> reserve =
      forward_ex(in, z, y, stats, momentum, eps, CUDNN_BATCHNORM_SPATIAL_PERSISTENT, ops, &relu);
  if (!reserve) return std::nullopt;
  return BatchNormForward{.impl = BatchNormImpl::CudnnEx, .reserve = *reserve, .persistent = true};
}

void batch_norm_fused_backward(const Tensor& dy, const FusedBatchNormSaved& s, double eps,
                               const BatchNormGrads& grads) {
  if (s.impl == BatchNormImpl::KernelReluFromX) {
    batch_norm_backward_kernel(dy, s.x, s.weight, s.stats, grads, {}, {.on = true, .bias = s.bias});
    return;
  }
  if (s.impl == BatchNormImpl::Kernel) {
    batch_norm_backward_kernel(dy, s.x, s.weight, s.stats, grads, s.y);
    return;
  }
  nabla::cuda::DeviceGuard device(s.x.device().index);
  const ReluDescriptor relu;
  const auto ops = s.add ? CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION : CUDNN_BATCHNORM_OPS_BN_ACTIVATION;
  if (backward_ex(dy, s.x, s.y, s.weight, s.bias, s.stats, s.reserve, eps, CUDNN_BATCHNORM_SPATIAL_PERSISTENT,
                  ops, &relu, grads)) {
    return;
  }
  // cuDNN ran the forward but refuses its backward: nabla's kernel, masked by the ReLU's output.
  batch_norm_backward_kernel(dy, s.x, s.weight, s.stats, grads, s.y);
}

BatchNormForward batch_norm_backward_route(const Tensor& x, bool relu) {
  BatchNormForward kernels{.impl = BatchNormImpl::Kernel, .reserve = Tensor(), .persistent = false};
  if (!cudnn_can_take(x, /*training=*/true, CUDNN_BN_MIN_EPSILON) || x.dtype() == kFloat64) return kernels;
  if (relu) return kernels;  // the mask inside the sums pass (norm_kernels.h)
  nabla::cuda::DeviceGuard device(x.device().index);
  const Descs d(x, CUDNN_BATCHNORM_SPATIAL_PERSISTENT);
  size_t reserve_bytes = 0;
  const cudnnStatus_t status = cudnnGetBatchNormalizationTrainingExReserveSpaceSize(
      nabla::cuda::cudnn_handle(), CUDNN_BATCHNORM_SPATIAL_PERSISTENT, CUDNN_BATCHNORM_OPS_BN, nullptr,
      d.x.get(), &reserve_bytes);
  if (status == CUDNN_STATUS_BAD_PARAM || !NABLA_CUDNN_RAN(status)) return kernels;
  // Zeroed, the state of a reserve no forward has written. The plain backward runs right from it
  // (CudaConvBatchNorm.BatchNormFromSumsIsAsCloseToFloat32AsComposed); the fused ones do not:
  // BN_ADD_ACTIVATION's backward from a zeroed reserve gave gradients unrelated to the true ones
  // on an H200.
  Tensor reserve = bytes_on(x, reserve_bytes);
  if (reserve_bytes > 0) fill(reserve, 0.0);
  return {.impl = BatchNormImpl::CudnnEx, .reserve = reserve, .persistent = true};
}

}  // namespace nabla::ops::cuda
