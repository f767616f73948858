// The CUDA indexing entry points of a build without CUDA (see reduce_fallback.cpp).
#include "nabla/ops/cuda/indexing_kernels.h"

namespace nabla::ops::cuda {

std::pair<int64_t, int64_t> index_range(const Tensor&) {
  NABLA_CHECK(false, "cuda::index_range: nabla was built without CUDA");
  return {0, 0};
}
void index_select(const Tensor&, int64_t, const Tensor&, const Tensor&) {
  NABLA_CHECK(false, "cuda::index_select: nabla was built without CUDA");
}
void index_add_(const Tensor&, int64_t, const Tensor&, const Tensor&) {
  NABLA_CHECK(false, "cuda::index_add_: nabla was built without CUDA");
}
void gather(const Tensor&, int64_t, const Tensor&, const Tensor&) {
  NABLA_CHECK(false, "cuda::gather: nabla was built without CUDA");
}
void scatter_add_(const Tensor&, int64_t, const Tensor&, const Tensor&) {
  NABLA_CHECK(false, "cuda::scatter_add_: nabla was built without CUDA");
}

}  // namespace nabla::ops::cuda
