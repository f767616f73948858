// The fused optimizer entry points of a build without CUDA: no tensor is ever eligible.
#include "nabla/core/error.h"
#include "nabla/optim/multi_tensor.h"

namespace nabla::optim::cuda {

bool multi_tensor_eligible(const Tensor&, const TensorList&) {
  return false;
}

void multi_tensor_sgd(const TensorList&, const TensorList&, const TensorList&, const std::vector<bool>&,
                      const SgdStep&) {
  NABLA_CHECK(false, "optim::cuda::multi_tensor_sgd: nabla was built without CUDA");
}

void multi_tensor_adam(const TensorList&, const TensorList&, const TensorList&, const TensorList&,
                       const TensorList&, const std::vector<int64_t>&, const AdamStep&) {
  NABLA_CHECK(false, "optim::cuda::multi_tensor_adam: nabla was built without CUDA");
}

Tensor multi_tensor_sum_of_squares(const TensorList&) {
  NABLA_CHECK(false, "optim::cuda::multi_tensor_sum_of_squares: nabla was built without CUDA");
}

}  // namespace nabla::optim::cuda
