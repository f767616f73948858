// tril, triu and masked_fill, composed from where(): one formula for both backends, and the
// gradient comes from where's backward.
#include "nabla/ops/masking.h"

#include <cmath>

#include "nabla/ops/detail/dispatch.h"
#include "nabla/ops/elementwise.h"
#include "nabla/ops/factory.h"
#include "nabla/ops/view.h"

namespace nabla {

namespace {

// (rows, cols) bool: column - row <= diagonal (lower) or >= diagonal (upper).
Tensor triangle(int64_t rows, int64_t cols, int64_t diagonal, bool lower, Device device) {
  const Tensor row = arange(static_cast<double>(rows), {.dtype = kInt64, .device = device}).unsqueeze(1);
  const Tensor col = arange(static_cast<double>(cols), {.dtype = kInt64, .device = device}).unsqueeze(0);
  const Tensor offset = col - row;  // (rows, cols)
  return lower ? le(offset, static_cast<double>(diagonal)) : ge(offset, static_cast<double>(diagonal));
}

Tensor keep_triangle(const Tensor& x, TriangleOptions options, bool lower, const char* op) {
  ops::check_defined(op, x, "input");
  NABLA_CHECK(x.dim() >= 2, "{}: expected a tensor of at least 2 dims, got {}", op, describe(x));
  const Tensor keep = triangle(x.size(-2), x.size(-1), options.diagonal, lower, x.device());
  return where(keep, x, zeros({}, x.options()));
}

}  // namespace

Tensor tril(const Tensor& x, TriangleOptions options) {
  return keep_triangle(x, options, /*lower=*/true, "tril");
}

Tensor triu(const Tensor& x, TriangleOptions options) {
  return keep_triangle(x, options, /*lower=*/false, "triu");
}

Tensor masked_fill(const Tensor& x, const Tensor& mask, double value) {
  ops::check_defined("masked_fill", x, "input");
  ops::check_defined("masked_fill", mask, "mask");
  NABLA_CHECK(mask.dtype() == kBool, "masked_fill: the mask must be bool, got {}", describe(mask));
  NABLA_CHECK(mask.dim() <= x.dim() && broadcast_shapes(mask.sizes(), x.sizes(), "masked_fill") == x.sizes(),
              "masked_fill: the mask {} does not broadcast to the input's shape {}", shape_str(mask.sizes()),
              shape_str(x.sizes()));
  NABLA_CHECK(x.is_floating_point() || (std::isfinite(value) && value == std::nearbyint(value) &&
                                        (x.dtype() != kBool || value == 0 || value == 1)),
              "masked_fill: the value {} does not fit a {} tensor (expected {})", value,
              dtype_name(x.dtype()), x.dtype() == kBool ? "0 or 1" : "a finite whole number");
  return where(mask, full({}, value, x.options()), x);
}

}  // namespace nabla
