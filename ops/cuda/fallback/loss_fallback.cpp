// The CUDA loss entry points of a build without CUDA (see reduce_fallback.cpp).
#include "nabla/ops/cuda/loss_kernels.h"

namespace nabla::ops::cuda {

void nll_forward(const Tensor&, const Tensor&, int64_t, const Tensor&) {
  NABLA_CHECK(false, "cuda::nll_forward: nabla was built without CUDA");
}
void nll_backward(const Tensor&, const Tensor&, int64_t, const Tensor&) {
  NABLA_CHECK(false, "cuda::nll_backward: nabla was built without CUDA");
}

}  // namespace nabla::ops::cuda
