// group_norm (ops/norm.h) as layer_norm over each (sample, group), then the per-channel affine.
#include <cmath>
#include <optional>

#include "nabla/ops/detail/dispatch.h"
#include "nabla/ops/elementwise.h"
#include "nabla/ops/norm.h"

namespace nabla {

Tensor group_norm(const Tensor& x, int64_t groups, const Tensor& weight, const Tensor& bias, double eps) {
  ops::check_defined("group_norm", x, "input");
  NABLA_CHECK(x.dim() >= 2, "group_norm: expected an input (N, C, *), got {}", describe(x));
  NABLA_CHECK(x.is_floating_point(), "group_norm: expected a floating-point input, got {}", describe(x));
  const int64_t n = x.size(0), c = x.size(1);
  NABLA_CHECK(groups > 0 && c % groups == 0,
              "group_norm: num_groups must be positive and divide the input's {} channels, got {}", c,
              groups);
  for (const Tensor* t : {&weight, &bias}) {
    NABLA_CHECK(!t->defined() || (t->dim() == 1 && t->size(0) == c),
                "group_norm: expected weight and bias of shape [{}] (one per channel), got {}", c,
                describe(*t));
  }
  NABLA_CHECK(eps > 0 && std::isfinite(eps), "group_norm: expected eps > 0, got {}", eps);
  const MemoryFormat format = x.suggest_memory_format();
  if (x.numel() == 0) return x.clone();
  const int64_t per_group = x.numel() / (n * groups);
  // 16-bit x: the normalized values stay float32 through the affine step and round once, to
  // x's dtype (as PyTorch returns it), whatever dtype the parameters have.
  const bool reduced = is_reduced_float(x.dtype());
  const std::optional<DType> work = reduced ? std::optional<DType>(kFloat32) : std::nullopt;
  Tensor y = layer_norm(x.reshape({n, groups, per_group}), {per_group}, {}, {}, {.eps = eps, .dtype = work})
                 .reshape(x.sizes());
  // (C) -> (1, C, 1, ...) to broadcast over the positions.
  Shape channel_shape(static_cast<size_t>(x.dim()), 1);
  channel_shape[1] = c;
  if (weight.defined()) y = y * weight.to(y.dtype()).reshape(channel_shape);
  if (bias.defined()) y = y + bias.to(y.dtype()).reshape(channel_shape);
  if (reduced) y = y.to(x.dtype());
  return y.dim() == 4 ? y.contiguous(format) : y;
}

}  // namespace nabla
