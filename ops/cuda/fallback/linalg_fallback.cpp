// The CUDA matrix-product entry points of a build without CUDA (see reduce_fallback.cpp).
#include "nabla/ops/cuda/linalg_kernels.h"

namespace nabla::ops::cuda {

bool is_gemm_operand(const Tensor&) {
  NABLA_CHECK(false, "cuda::is_gemm_operand: nabla was built without CUDA");
  return false;
}
void gemm(const Tensor&, const Tensor&, const Tensor&, const GemmOptions&) {
  NABLA_CHECK(false, "cuda::gemm: nabla was built without CUDA");
}

}  // namespace nabla::ops::cuda
