// The CUDA convolution entry points of a build without CUDA (see reduce_fallback.cpp).
#include "nabla/ops/cuda/conv_kernels.h"

namespace nabla::ops::cuda {

void conv2d_forward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const ConvParams&,
                    const CudnnSettings&) {
  NABLA_CHECK(false, "cuda::conv2d_forward: nabla was built without CUDA");
}
void conv2d_backward_input(const Tensor&, const Tensor&, const Tensor&, const ConvParams&,
                           const CudnnSettings&) {
  NABLA_CHECK(false, "cuda::conv2d_backward_input: nabla was built without CUDA");
}
void conv2d_backward_weight(const Tensor&, const Tensor&, const Tensor&, const ConvParams&,
                            const CudnnSettings&) {
  NABLA_CHECK(false, "cuda::conv2d_backward_weight: nabla was built without CUDA");
}
void clear_conv_algorithm_cache() {}
size_t conv_algorithm_cache_size() {
  return 0;
}

}  // namespace nabla::ops::cuda
