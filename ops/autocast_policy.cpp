// The autocast rules per category (see ops/detail/autocast_policy.h for the table).
#include "nabla/ops/detail/autocast_policy.h"

#include "nabla/core/autocast.h"
#include "nabla/core/autograd/grad_mode.h"

namespace nabla::ops {

namespace {

// Autocast touches floating tensors other than float64, on the device type it was enabled for.
bool applies(const autocast::State& state, const Tensor& t) {
  return state.enabled && t.defined() && t.device().type == state.device_type && t.is_floating_point() &&
         t.dtype() != kFloat64;
}

// Parameters are cast once per scope: a float32 leaf that requires grad.
bool cacheable(const Tensor& t) {
  return t.dtype() == kFloat32 && t.requires_grad() && t.is_leaf();
}

Tensor cast_to_lower(const Tensor& t, DType dtype) {
  // A cast made without grad mode has no edge to the source; it must not serve a later use that
  // needs one (and the other way round), so grad mode is part of the key.
  const bool with_grad = GradMode::is_enabled();
  // Other leaves (frozen weights, inputs) are cast per use, as PyTorch does: caching them would
  // keep their casts for the whole scope.
  if (!cacheable(t) && t.is_leaf()) return t.to(dtype);
  if (!cacheable(t)) {
    // Activations: the same cast again while the source is held (Note [Activation casts]).
    Tensor cast = autocast::cached_activation_cast(t, dtype, with_grad);
    if (cast.defined()) return cast;
    cast = t.to(dtype);
    autocast::store_activation_cast(t, dtype, with_grad, cast);
    return cast;
  }
  Tensor cast = autocast::cached_cast(t, dtype, with_grad);
  if (cast.defined()) return cast;
  cast = t.to(dtype);
  autocast::store_cast(t, dtype, with_grad, cast);
  return cast;
}

}  // namespace

DType autocast_dtype(AutocastCategory category, const Tensor& t) {
  const autocast::State state = autocast::current();
  if (!applies(state, t)) return t.defined() ? t.dtype() : kFloat32;
  switch (category) {
    case AutocastCategory::LowerPrecision:
      return state.dtype;
    case AutocastCategory::Float32:
      return kFloat32;
    case AutocastCategory::Widest:          // the op's own promotion decides
    case AutocastCategory::NormStatistics:  // the kernels keep float32 statistics
      return t.dtype();
  }
  return t.dtype();
}

Tensor autocast_one(AutocastCategory category, const Tensor& t) {
  const autocast::State state = autocast::current();
  if (!applies(state, t)) return t;
  const DType target = autocast_dtype(category, t);
  if (target == t.dtype()) return t;
  return category == AutocastCategory::LowerPrecision ? cast_to_lower(t, target) : t.to(target);
}

}  // namespace nabla::ops
