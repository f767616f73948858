// The fused unscale entry points of a build without CUDA: no gradient is ever eligible.
#include "nabla/amp/cuda/unscale.h"
#include "nabla/core/error.h"

namespace nabla::amp::cuda {

bool unscale_eligible(const Tensor&) {
  return false;
}

void multi_tensor_unscale(const TensorList&, const Tensor&, const Tensor&) {
  NABLA_CHECK(false, "amp::cuda::multi_tensor_unscale: nabla was built without CUDA");
}

}  // namespace nabla::amp::cuda
