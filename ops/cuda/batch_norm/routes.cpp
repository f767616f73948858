// The CUDA batch-norm family's route table and its backend (ops/detail/batch_norm.h).
//
// Every route a CUDA batch norm can take is chosen here, by batch_norm_route:
//
//   training, channels_last float64, cuDNN takes the call  -> CudnnEx
//   training, relu(bn(x)) without a residual               -> KernelsReluMaskFromX
//   training, anything else                                -> Kernels
//   eval, channels_last float16/float32/float64, cuDNN     -> CudnnInference
//   eval, anything else                                    -> KernelsInference
//
// Why these (Note [cuDNN batch norm] in cudnn.cpp): nabla's kernels beat cuDNN's NHWC training
// kernels in every 16-bit and float32 case, so cuDNN keeps float64 training, where its results
// are the reference the kernels were checked against, and eval, where it is as fast. The fused
// forms (ReLU, residual add) run on the kernels only: fuses_relu says where, and front ends
// compose batch_norm, add and relu elsewhere.
#include <array>

#include "nabla/ops/cuda/batch_norm/kernels.h"

namespace nabla::ops::cuda {

namespace {

constexpr std::array kRoutes = {BatchNormRoute::Kernels, BatchNormRoute::KernelsReluMaskFromX,
                                BatchNormRoute::CudnnEx, BatchNormRoute::KernelsInference,
                                BatchNormRoute::CudnnInference};

bool is_channels_last(const Tensor& x) {
  return x.dim() == 4 && !x.is_contiguous() && x.is_contiguous(MemoryFormat::ChannelsLast);
}

bool fuses_relu(const Tensor& x) {
  return x.is_contiguous() || (is_channels_last(x) && x.dtype() != kFloat64);
}

BatchNormSaved forward(const BatchNormInputs& in, const Tensor& z, bool relu, const Tensor& y,
                       const BatchNormStats& stats, double momentum, double eps) {
  NABLA_ASSERT(!(relu || z.defined()) || fuses_relu(in.x), "batch norm: no fused route for {}",
               describe(in.x));
  BatchNormSaved saved{.x = in.x, .weight = in.weight, .stats = stats, .relu = relu, .add = z.defined()};
  const BatchNormRoute route = batch_norm_route(in.x, /*training=*/true, relu, z.defined(), eps);
  if (route == BatchNormRoute::CudnnEx) {
    if (std::optional<Tensor> reserve = cudnn_batch_norm_forward(in, y, stats, momentum, eps)) {
      saved.reserve = *reserve;
      saved.route = static_cast<uint8_t>(route);
      return saved;
    }
  }
  batch_norm_forward_kernel(in, y, stats, momentum, eps, z, relu);
  if (route == BatchNormRoute::KernelsReluMaskFromX) {
    saved.bias = in.bias;  // the mask is recomputed from x, through the affine map
    saved.route = static_cast<uint8_t>(route);
  } else if (relu) {
    saved.y = y;  // the mask is read from the output
  }
  return saved;
}

void inference(const BatchNormInputs& in, const Tensor& y, double eps) {
  if (in.x.numel() == 0) return;
  if (batch_norm_route(in.x, /*training=*/false, false, false, eps) == BatchNormRoute::CudnnInference &&
      cudnn_batch_norm_inference(in, y, eps))
    return;
  batch_norm_inference_kernel(in, y, eps);
}

void backward(const Tensor& dy, const BatchNormSaved& s, double eps, const BatchNormGrads& grads) {
  switch (static_cast<BatchNormRoute>(s.route)) {
    case BatchNormRoute::CudnnEx:
      if (cudnn_batch_norm_backward(dy, s.x, s.weight, s.stats, s.reserve, eps, grads)) return;
      // The saved mean and inverse std are the same pair whichever route made them.
      batch_norm_backward_kernel(dy, s.x, s.weight, s.stats, grads);
      return;
    case BatchNormRoute::KernelsReluMaskFromX:
      batch_norm_backward_kernel(dy, s.x, s.weight, s.stats, grads, {}, {.on = true, .bias = s.bias});
      return;
    case BatchNormRoute::Kernels:
      NABLA_ASSERT(!s.relu || s.y.defined(), "batch norm: a fused ReLU's backward needs the saved output");
      batch_norm_backward_kernel(dy, s.x, s.weight, s.stats, grads, s.relu ? s.y : Tensor());
      return;
    case BatchNormRoute::KernelsInference:
    case BatchNormRoute::CudnnInference:
      break;
  }
  NABLA_ASSERT(false, "batch norm: backward of an unknown route {}", int(s.route));
}

}  // namespace

std::span<const BatchNormRoute> batch_norm_routes() {
  return kRoutes;
}

const char* route_name(BatchNormRoute route) {
  switch (route) {
    case BatchNormRoute::Kernels:
      return "kernels";
    case BatchNormRoute::KernelsReluMaskFromX:
      return "kernels, ReLU mask from x";
    case BatchNormRoute::CudnnEx:
      return "cuDNN Ex";
    case BatchNormRoute::KernelsInference:
      return "kernels, eval";
    case BatchNormRoute::CudnnInference:
      return "cuDNN, eval";
  }
  return "unknown";
}

BatchNormRoute batch_norm_route(const Tensor& x, bool training, bool relu, bool add, double eps) {
  if (!training) {
    return cudnn_batch_norm_takes(x, false, eps) ? BatchNormRoute::CudnnInference
                                                 : BatchNormRoute::KernelsInference;
  }
  if (!relu && cudnn_batch_norm_takes(x, true, eps)) return BatchNormRoute::CudnnEx;
  if (relu && !add) return BatchNormRoute::KernelsReluMaskFromX;
  return BatchNormRoute::Kernels;
}

const BatchNormBackend kBatchNorm{
    .fuses_relu = fuses_relu, .forward = forward, .inference = inference, .backward = backward};

}  // namespace nabla::ops::cuda
