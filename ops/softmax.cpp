// softmax and log_softmax front ends. The kernels (ops/cpu/reduce.cpp, ops/cuda/reduce/softmax.cu) subtract
// the row max first, so large logits do not overflow. A dense input's output gets the same strides (a
// channels_last input gives a channels_last output), so the kernel writes it in place of a copy.
#include "nabla/ops/softmax.h"

#include "nabla/ops/autograd/function.h"
#include "nabla/ops/cpu/reduce_kernels.h"
#include "nabla/ops/cuda/reduce/kernels.h"
#include "nabla/ops/detail/alias.h"
#include "nabla/ops/detail/autocast_policy.h"
#include "nabla/ops/detail/dispatch.h"
#include "nabla/ops/elementwise.h"
#include "nabla/ops/reduce.h"

namespace nabla {

namespace {

Tensor empty_with_layout_of(const Tensor& x) {
  const TensorOptions options{.dtype = x.dtype(), .device = x.device()};
  if (x.is_contiguous() || !is_non_overlapping_and_dense(x.sizes(), x.strides())) {
    return Tensor::empty(x.sizes(), options);
  }
  // Dense strides address exactly numel elements from offset 0.
  return ops::alias(Tensor::empty({x.numel()}, options), x.sizes(), x.strides(), 0);
}

Tensor softmax_forward(const Tensor& x, int64_t dim_in, bool log) {
  const char* name = log ? "log_softmax" : "softmax";
  ops::check_defined(name, x, "self");
  NABLA_CHECK(x.is_floating_point(),
              "{}: expected a floating-point tensor, got {}; convert it first, e.g. x.to(nabla::kFloat32)",
              name, describe(x));
  const int64_t dim = wrap_dim(dim_in, x.dim(), name);
  Tensor y = empty_with_layout_of(x);
  ops::dispatch(
      "softmax", x, [&] { ops::cpu::softmax(x, dim, y, log); }, [&] { ops::cuda::softmax(x, dim, y, log); });
  if (autograd::needs_grad({x})) {
    // Both gradients need only the output. Under create_graph the saved output unpacks with its
    // history (SavedTensor), so second derivatives include the path through y.
    autograd::record(name, {x}, {y}, {y}, [dim, log](autograd::BackwardContext& ctx) {
      const Tensor& g = ctx.grad();
      const Tensor& y = ctx.saved[0];
      if (log) return TensorList{g - exp(y) * sum(g, {dim}, /*keepdim=*/true)};
      return TensorList{y * (g - sum(g * y, {dim}, /*keepdim=*/true))};
    });
  }
  return y;
}

}  // namespace

Tensor softmax(const Tensor& x, int64_t dim) {
  // Autocast: float32.
  return softmax_forward(ops::autocast_one(ops::AutocastCategory::Float32, x), dim, false);
}
Tensor log_softmax(const Tensor& x, int64_t dim) {
  // Autocast: float32.
  return softmax_forward(ops::autocast_one(ops::AutocastCategory::Float32, x), dim, true);
}

}  // namespace nabla
