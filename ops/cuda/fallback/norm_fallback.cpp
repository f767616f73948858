// The CUDA batch-norm and layer-norm entry points of a build without CUDA. No tensor can live
// on a CUDA device in such a build, so front ends never reach these; they exist for the linker
// and say clearly what happened if something calls them anyway.
#include "nabla/ops/cuda/norm_kernels.h"

namespace nabla::ops::cuda {

BatchNormForward batch_norm_forward(const BatchNormInputs&, const Tensor&, const BatchNormStats&, double,
                                    double) {
  NABLA_CHECK(false, "cuda::batch_norm_forward: nabla was built without CUDA");
  return {};
}
void batch_norm_inference(const BatchNormInputs&, const Tensor&, double) {
  NABLA_CHECK(false, "cuda::batch_norm_inference: nabla was built without CUDA");
}
void batch_norm_backward(const Tensor&, const Tensor&, const Tensor&, const BatchNormStats&,
                         const BatchNormForward&, double, const BatchNormGrads&) {
  NABLA_CHECK(false, "cuda::batch_norm_backward: nabla was built without CUDA");
}
void batch_norm_forward_kernel(const BatchNormInputs&, const Tensor&, const BatchNormStats&, double, double,
                               const Tensor&, bool) {
  NABLA_CHECK(false, "cuda::batch_norm_forward_kernel: nabla was built without CUDA");
}
void batch_norm_inference_kernel(const BatchNormInputs&, const Tensor&, double) {
  NABLA_CHECK(false, "cuda::batch_norm_inference_kernel: nabla was built without CUDA");
}
void batch_norm_backward_kernel(const Tensor&, const Tensor&, const Tensor&, const BatchNormStats&,
                                const BatchNormGrads&, const Tensor&) {
  NABLA_CHECK(false, "cuda::batch_norm_backward_kernel: nabla was built without CUDA");
}
std::optional<BatchNormForward> batch_norm_fused_forward(const BatchNormInputs&, const Tensor&, const Tensor&,
                                                         const BatchNormStats&, double, double) {
  NABLA_CHECK(false, "cuda::batch_norm_fused_forward: nabla was built without CUDA");
  return std::nullopt;
}
void batch_norm_fused_backward(const Tensor&, const FusedBatchNormSaved&, double, const BatchNormGrads&) {
  NABLA_CHECK(false, "cuda::batch_norm_fused_backward: nabla was built without CUDA");
}
void layer_norm_forward(const Tensor&, const Tensor&, const Tensor&, double, const Tensor&, const Tensor&,
                        const Tensor&) {
  NABLA_CHECK(false, "cuda::layer_norm_forward: nabla was built without CUDA");
}
void layer_norm_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                         const Tensor&, const Tensor&, const Tensor&) {
  NABLA_CHECK(false, "cuda::layer_norm_backward: nabla was built without CUDA");
}

}  // namespace nabla::ops::cuda
