// The CUDA elementwise entry points of a build without CUDA. No tensor can live on a CUDA
// device in such a build, so front ends never reach these; they exist for the linker and say
// clearly what happened if something calls them anyway.
#include "nabla/ops/cuda/kernels.h"

namespace nabla::ops::cuda {

namespace {
[[noreturn]] void built_without_cuda(const char* op) {
  NABLA_CHECK(false, "{}: nabla was built without CUDA", op);
  __builtin_unreachable();
}
}  // namespace

void fill(const Tensor&, double) {
  built_without_cuda("cuda::fill");
}
void copy(const Tensor&, const Tensor&) {
  built_without_cuda("cuda::copy");
}
void copy_bytes_many(const std::vector<ByteCopy>&, int) {
  built_without_cuda("cuda::copy_bytes_many");
}
void arange(const Tensor&, double, double) {
  built_without_cuda("cuda::arange");
}
void uniform(const Tensor&, PhiloxState, double, double) {
  built_without_cuda("cuda::uniform");
}
void normal(const Tensor&, PhiloxState, double, double) {
  built_without_cuda("cuda::normal");
}
void randint(const Tensor&, PhiloxState, int64_t, int64_t) {
  built_without_cuda("cuda::randint");
}
void bernoulli(const Tensor&, PhiloxState, double) {
  built_without_cuda("cuda::bernoulli");
}
void unary(UnaryOp, const Tensor&, const Tensor&, UnaryParams) {
  built_without_cuda("cuda::unary");
}
void binary(BinaryOp, const Tensor&, const Tensor&, const Tensor&, double) {
  built_without_cuda("cuda::binary");
}
void where(const Tensor&, const Tensor&, const Tensor&, const Tensor&) {
  built_without_cuda("cuda::where");
}

}  // namespace nabla::ops::cuda
