// The CUDA pooling entry points of a build without CUDA (see reduce_fallback.cpp).
#include "nabla/ops/cuda/pool_kernels.h"

namespace nabla::ops::cuda {

void max_pool2d(const Tensor&, const PoolGeometry&, const Tensor&, const Tensor&) {
  NABLA_CHECK(false, "cuda::max_pool2d: nabla was built without CUDA");
}
void max_pool2d_backward(const Tensor&, const Tensor&, const PoolGeometry&, const Tensor&) {
  NABLA_CHECK(false, "cuda::max_pool2d_backward: nabla was built without CUDA");
}
void avg_pool2d(const Tensor&, const PoolGeometry&, const Tensor&) {
  NABLA_CHECK(false, "cuda::avg_pool2d: nabla was built without CUDA");
}
void avg_pool2d_backward(const Tensor&, const PoolGeometry&, const Tensor&) {
  NABLA_CHECK(false, "cuda::avg_pool2d_backward: nabla was built without CUDA");
}

}  // namespace nabla::ops::cuda
