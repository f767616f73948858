// The CUDA reduction and softmax entry points of a build without CUDA. No tensor can live on a
// CUDA device in such a build, so front ends never reach these; they exist for the linker and
// say clearly what happened if something calls them anyway.
#include "nabla/ops/cuda/reduce_kernels.h"

namespace nabla::ops::cuda {

void reduce(ReduceOp, const Tensor&, const Shape&, const Tensor&, ReduceParams) {
  NABLA_CHECK(false, "cuda::reduce: nabla was built without CUDA");
}
void reduce_with_index(ReduceOp, const Tensor&, const Shape&, const Tensor&, const Tensor&) {
  NABLA_CHECK(false, "cuda::reduce_with_index: nabla was built without CUDA");
}
void softmax(const Tensor&, int64_t, const Tensor&, bool) {
  NABLA_CHECK(false, "cuda::softmax: nabla was built without CUDA");
}

}  // namespace nabla::ops::cuda
