// dropout front end. The keep mask is a bool tensor from nabla::bernoulli (so it shares the
// Philox element mapping of ops/cpu/fill_copy.cpp and ops/cuda/elementwise/random.cu, and costs one byte per
// element to keep for backward); the output is where(mask, x, 0) * scale, which keeps x's
// layout. The backward applies the same mask and scale to the gradient with differentiable ops,
// so create_graph works.
#include "nabla/ops/dropout.h"

#include "nabla/ops/autograd/function.h"
#include "nabla/ops/detail/dispatch.h"
#include "nabla/ops/elementwise.h"
#include "nabla/ops/factory.h"

namespace nabla {

namespace {

Tensor masked_scale(const Tensor& t, const Tensor& mask, double scale) {
  return where(mask, t, zeros({}, t.options())) * scale;
}

}  // namespace

Tensor dropout(const Tensor& x, DropoutOptions options) {
  const double p = options.p;
  ops::check_defined("dropout", x, "input");
  NABLA_CHECK(p >= 0.0 && p <= 1.0, "dropout: expected a probability p in [0, 1], got {}", p);
  NABLA_CHECK(x.is_floating_point(), "dropout: expected a floating-point input, got {}", describe(x));
  if (!options.training || p == 0.0) return x;
  if (p == 1.0) return x * 0.0;
  const Tensor mask =
      bernoulli(x.sizes(), 1.0 - p, {.dtype = kBool, .device = x.device()}, options.generator);
  const double scale = 1.0 / (1.0 - p);
  Tensor y;
  {
    NoGradGuard no_grad;
    y = masked_scale(x, mask, scale);
  }
  if (autograd::needs_grad({x})) {
    autograd::record("dropout", {x}, {y}, /*save=*/{mask}, [scale](autograd::BackwardContext& ctx) {
      return TensorList{masked_scale(ctx.grad(), ctx.saved[0], scale)};
    });
  }
  return y;
}

Tensor dropout2d(const Tensor& x, DropoutOptions options) {
  const double p = options.p;
  ops::check_defined("dropout2d", x, "input");
  NABLA_CHECK(x.dim() == 3 || x.dim() == 4, "dropout2d: expected (N, C, H, W) or unbatched (C, H, W), got {}",
              describe(x));
  NABLA_CHECK(p >= 0.0 && p <= 1.0, "dropout2d: expected a probability p in [0, 1], got {}", p);
  NABLA_CHECK(x.is_floating_point(), "dropout2d: expected a floating-point input, got {}", describe(x));
  if (!options.training || p == 0.0) return x;
  if (p == 1.0) return x * 0.0;
  // One keep factor per channel, 0 or 1 / (1 - p), broadcast over (H, W): the product is
  // differentiable as it stands (the mask is a constant), and keeps x's layout. A 3-d input is
  // (N, C, L), as PyTorch reads it (with a warning there): one factor per (n, c).
  Shape mask_shape = x.sizes();
  mask_shape[mask_shape.size() - 1] = 1;
  if (x.dim() == 4) mask_shape[2] = 1;
  const Tensor keep =
      bernoulli(mask_shape, 1.0 - p, {.dtype = x.dtype(), .device = x.device()}, options.generator);
  return x * (keep * (1.0 / (1.0 - p)));
}

}  // namespace nabla
