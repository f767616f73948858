// In-place elementwise ops (add_, relu_, ...).
//
// Without autograd they write straight into self. When autograd records, the out-of-place op
// runs on a clone of self (so whatever it saves for backward is not overwritten), the result is
// copied into self, and self takes over the result's history (autograd::rebase_history).
// relu_ is special-cased: it saves its own output, which in-place is self after the write, so
// it needs no clone; that keeps in-place ReLU's memory saving under autograd.
#include <cmath>
#include <limits>

#include "nabla/ops/autograd/function.h"
#include "nabla/ops/copy.h"
#include "nabla/ops/cpu/kernels.h"
#include "nabla/ops/cuda/elementwise/kernels.h"
#include "nabla/ops/detail/dispatch.h"
#include "nabla/ops/detail/inplace.h"
#include "nabla/ops/elementwise.h"
#include "nabla/ops/fusion/recorder.h"

namespace nabla {

using ops::BinaryOp;
using ops::UnaryOp;

namespace {

void check_fits(const Tensor& self, const Shape& result_sizes, DType result_dtype, const char* name) {
  NABLA_CHECK(result_sizes == self.sizes(),
              "{}: the result has shape {}, which cannot be written into self {} in place", name,
              shape_str(result_sizes), describe(self));
  NABLA_CHECK(!(is_floating(result_dtype) && !self.is_floating_point()),
              "{}: the result dtype {} cannot be written into {} self in place; use the out-of-place op",
              name, dtype_name(result_dtype), dtype_name(self.dtype()));
}

template <typename OutOfPlace>
Tensor& inplace_binary(Tensor& self, const Tensor& other, BinaryOp op, double alpha, const char* name,
                       OutOfPlace out_of_place) {
  ops::check_defined(name, self, "self");
  ops::check_defined(name, other, "other");
  ops::check_same_device(name, {self, other});
  autograd::check_inplace(self, name);
  Shape sizes = broadcast_shapes(self.sizes(), other.sizes(), name);
  DType common = promote_types(self.dtype(), other.dtype());
  if (op == BinaryOp::Div && !is_floating(common)) common = kFloat32;
  check_fits(self, sizes, common, name);
  if (autograd::needs_grad({self, other}))
    return ops::commit_in_place(self, out_of_place(self.clone(), other));
  if (common == self.dtype()) {
    // A float32 self takes a 16-bit other as it is on CUDA (ops::is_mixed_float_pair).
    const bool mixed = self.is_cuda() && ops::is_mixed_float_pair(op, self.dtype(), other.dtype());
    Tensor o = other.dtype() == common || mixed ? other : other.to(common);
    ops::dispatch(
        ops::name(op), self, [&] { ops::cpu::binary(op, self, o, self, alpha); },
        [&] { ops::cuda::binary(op, self, o, self, alpha); });
    self.bump_version();
    return self;
  }
  NoGradGuard no_grad;
  return copy_(self, out_of_place(self, other));
}

template <typename OutOfPlace>
Tensor& inplace_unary(Tensor& self, UnaryOp op, ops::UnaryParams params, const char* name,
                      OutOfPlace out_of_place) {
  ops::check_defined(name, self, "self");
  autograd::check_inplace(self, name);
  DType result = ops::is_float_only(op) && !self.is_floating_point() ? kFloat32 : self.dtype();
  if ((op == UnaryOp::AddScalar || op == UnaryOp::MulScalar) && !self.is_floating_point() &&
      std::floor(params.a) != params.a) {
    result = kFloat32;
  }
  check_fits(self, self.sizes(), result, name);
  if (autograd::needs_grad({self})) return ops::commit_in_place(self, out_of_place(self.clone()));
  if (result == self.dtype()) {
    ops::dispatch(
        ops::name(op), self, [&] { ops::cpu::unary(op, self, self, params); },
        [&] { ops::cuda::unary(op, self, self, params); });
    self.bump_version();
    return self;
  }
  NoGradGuard no_grad;
  return copy_(self, out_of_place(self));
}

}  // namespace

Tensor& add_(Tensor& self, const Tensor& other, double alpha) {
  return inplace_binary(self, other, BinaryOp::Add, alpha, "add_",
                        [alpha](const Tensor& a, const Tensor& b) { return add(a, b, alpha); });
}
Tensor& sub_(Tensor& self, const Tensor& other, double alpha) {
  return inplace_binary(self, other, BinaryOp::Sub, alpha, "sub_",
                        [alpha](const Tensor& a, const Tensor& b) { return sub(a, b, alpha); });
}
Tensor& mul_(Tensor& self, const Tensor& other) {
  return inplace_binary(self, other, BinaryOp::Mul, 1.0, "mul_",
                        [](const Tensor& a, const Tensor& b) { return mul(a, b); });
}
Tensor& div_(Tensor& self, const Tensor& other) {
  return inplace_binary(self, other, BinaryOp::Div, 1.0, "div_",
                        [](const Tensor& a, const Tensor& b) { return div(a, b); });
}
Tensor& add_(Tensor& self, double value) {
  return inplace_unary(self, UnaryOp::AddScalar, {.a = value}, "add_",
                       [value](const Tensor& a) { return a + value; });
}
Tensor& mul_(Tensor& self, double value) {
  return inplace_unary(self, UnaryOp::MulScalar, {.a = value}, "mul_",
                       [value](const Tensor& a) { return a * value; });
}
Tensor& neg_(Tensor& self) {
  return inplace_unary(self, UnaryOp::Neg, {}, "neg_", [](const Tensor& a) { return neg(a); });
}
Tensor& exp_(Tensor& self) {
  return inplace_unary(self, UnaryOp::Exp, {}, "exp_", [](const Tensor& a) { return exp(a); });
}
Tensor& sigmoid_(Tensor& self) {
  return inplace_unary(self, UnaryOp::Sigmoid, {}, "sigmoid_", [](const Tensor& a) { return sigmoid(a); });
}
Tensor& tanh_(Tensor& self) {
  return inplace_unary(self, UnaryOp::Tanh, {}, "tanh_", [](const Tensor& a) { return tanh(a); });
}

Tensor& clamp_(Tensor& self, std::optional<double> min, std::optional<double> max) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  NABLA_CHECK(min || max, "clamp_: give at least one of min and max");
  return inplace_unary(self, UnaryOp::Clamp, {.a = min.value_or(-kInf), .b = max.value_or(kInf)}, "clamp_",
                       [min, max](const Tensor& a) { return clamp(a, min, max); });
}

Tensor& relu_(Tensor& self) {
  ops::check_defined("relu_", self, "self");
  autograd::check_inplace(self, "relu_");
  NABLA_CHECK(self.dtype() != kBool, "relu_: not defined for bool tensors");
  // A batch norm's output, before anything read it: its held launch writes the ReLU instead
  // (Note [Batch norm and its ReLU] in ops/fusion/recorder_held.cpp).
  if (!ops::fusion::fold_relu_in_place(self)) {
    ops::dispatch(
        "relu_", self, [&] { ops::cpu::unary(UnaryOp::Relu, self, self, {}); },
        [&] { ops::cuda::unary(UnaryOp::Relu, self, self, {}); });
  }
  self.bump_version();
  if (autograd::needs_grad({self})) {
    // Saved after the write, so the saved version is the current one: later in-place writes to
    // self are still caught.
    autograd::record("ReluBackward", {self}, {self}, {self}, [](autograd::BackwardContext& c) {
      return TensorList{threshold_backward(c.grad(), c.saved[0])};
    });
  }
  return self;
}

}  // namespace nabla
