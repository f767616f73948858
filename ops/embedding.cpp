// embedding front end: index_select rows of the weight, with a backward that sums each output
// row's gradient into its weight row (index_add). Indices are checked once in the forward; the
// backward then calls the index_add kernel directly, so on CUDA it does not read the indices'
// range back to the host a second time. padding_idx rows are masked out of the gradient before
// the sum. The backward is linear in the gradient and records its own adjoint (a lookup of the
// incoming gradient), so create_graph works.
#include "nabla/ops/embedding.h"

#include <optional>

#include "nabla/ops/autograd/function.h"
#include "nabla/ops/cpu/indexing_kernels.h"
#include "nabla/ops/cuda/indexing/kernels.h"
#include "nabla/ops/detail/alias.h"
#include "nabla/ops/detail/dispatch.h"
#include "nabla/ops/elementwise.h"
#include "nabla/ops/factory.h"
#include "nabla/ops/indexing.h"
#include "nabla/ops/view.h"

namespace nabla {

namespace {

// Zeroes the rows of `rows` (M, D) whose index is padding_idx.
Tensor mask_padding(const Tensor& rows, const Tensor& flat, int64_t padding_idx) {
  if (padding_idx < 0) return rows;
  return where(ne(flat, static_cast<double>(padding_idx)).unsqueeze(1), rows, zeros({}, rows.options()));
}

// grad (..., D) summed into a (V, D) weight gradient at the rows named by flat (M). 16-bit
// gradients are summed in float32 and rounded once: a row that many tokens share would
// otherwise lose its small contributions (a float16 sum stops growing at 2048 + 1).
Tensor embedding_backward(const Tensor& grad, const Tensor& flat, int64_t num_rows, int64_t padding_idx) {
  const int64_t dim = grad.size(grad.dim() - 1);
  const DType dtype = grad.dtype();
  const DType sum_dtype = dtype == kFloat16 || dtype == kBFloat16 ? kFloat32 : dtype;
  Tensor grad_weight;
  {
    NoGradGuard no_grad;
    const Tensor rows = mask_padding(grad.detach().reshape({flat.numel(), dim}), flat, padding_idx)
                            .to(sum_dtype)
                            .contiguous();
    grad_weight = zeros({num_rows, dim}, {.dtype = sum_dtype, .device = grad.device()});
    ops::dispatch(
        "index_add_", grad, [&] { ops::cpu::index_add_(grad_weight, 0, flat, rows); },
        [&] { ops::cuda::index_add_(grad_weight, 0, flat, rows); });
    grad_weight = grad_weight.to(dtype);
  }
  if (autograd::needs_grad({grad})) {
    autograd::record("embedding_backward", {grad}, {grad_weight}, /*save=*/{flat},
                     [padding_idx, sizes = grad.sizes()](autograd::BackwardContext& ctx) {
                       const Tensor& flat = ctx.saved[0];
                       return TensorList{
                           mask_padding(index_select(ctx.grad(), 0, flat), flat, padding_idx).reshape(sizes)};
                     });
  }
  return grad_weight;
}

}  // namespace

Tensor embedding(const Tensor& weight, const Tensor& indices, const EmbeddingOptions& options) {
  ops::check_defined("embedding", weight, "weight");
  ops::check_defined("embedding", indices, "indices");
  ops::check_same_device("embedding", {weight, indices});
  NABLA_CHECK(weight.dim() == 2, "embedding: expected a 2-d weight (num_embeddings, embedding_dim), got {}",
              describe(weight));
  NABLA_CHECK(indices.dtype() == kInt64, "embedding: expected int64 indices, got {}", describe(indices));
  const int64_t num_rows = weight.size(0), dim = weight.size(1);
  const int64_t padding_idx = options.padding_idx;
  NABLA_CHECK(padding_idx == -1 || (padding_idx >= 0 && padding_idx < num_rows),
              "embedding: expected padding_idx in [0, {}) or -1 (none) for weight {}, got {}", num_rows,
              describe(weight), padding_idx);
  const Tensor flat = indices.reshape({indices.numel()}).contiguous();
  // On CUDA the check runs on the device and reports at the next wait (Note [Checks on the
  // device]); the CPU finds the first bad index here.
  std::optional<int64_t> bad;
  const auto message = [&] {
    return fmt::format("embedding: index {{}} is out of range for weight {} (expected 0 <= index < {})",
                       describe(weight), num_rows);
  };
  ops::dispatch(
      "find_out_of_range", flat, [&] { bad = ops::cpu::find_out_of_range(flat, num_rows); },
      [&] { ops::cuda::check_indices(flat, num_rows, message()); });
  NABLA_CHECK(!bad, "{}", fmt::format(fmt::runtime(message()), bad.value_or(0)));
  Shape out_sizes(indices.sizes());
  out_sizes.push_back(dim);
  Tensor out = Tensor::empty(out_sizes, weight.options());
  const Tensor rows = ops::alias(out, {flat.numel(), dim}, {dim, 1}, 0);
  ops::dispatch(
      "index_select", weight, [&] { ops::cpu::index_select(weight, 0, flat, rows); },
      [&] { ops::cuda::index_select(weight, 0, flat, rows); });
  if (autograd::needs_grad({weight})) {
    autograd::record("embedding", {weight}, {out}, /*save=*/{flat},
                     [num_rows, padding_idx](autograd::BackwardContext& ctx) {
                       return TensorList{embedding_backward(ctx.grad(), ctx.saved[0], num_rows, padding_idx)};
                     });
  }
  return out;
}

}  // namespace nabla
