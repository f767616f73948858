// Internal. The elementwise op kinds shared by the CPU and CUDA backends: one entry point per
// family (unary, binary) takes the kind. Each kind's formula is in detail/elementwise_formulas.h
// (Note [One formula per op]); with_unary_op and with_binary_op turn a runtime kind into a
// template argument for every kind in the enum, so the backends' dispatch tables and the parity
// tests' coverage checks are made from the enum itself.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <utility>

#include "nabla/core/dtype.h"
#include "nabla/core/error.h"
#include "nabla/ops/detail/op_enums.h"

namespace nabla::ops {

inline constexpr std::array<const char*, static_cast<size_t>(UnaryOp::Count)> kUnaryOpNames = {
    "neg",         "abs",         "sign",       "exp",       "expm1",      "log",        "log1p",
    "sqrt",        "rsqrt",       "reciprocal", "relu",      "sigmoid",    "tanh",       "erf",
    "sin",         "cos",         "gelu",       "gelu_tanh", "silu",       "leaky_relu", "elu",
    "hardswish",   "hardsigmoid", "softplus",   "mish",      "add_scalar", "mul_scalar", "rsub_scalar",
    "rdiv_scalar", "pow_scalar",  "clamp",      "eq_scalar", "ne_scalar",  "lt_scalar",  "le_scalar",
    "gt_scalar",   "ge_scalar"};

inline constexpr std::array<const char*, static_cast<size_t>(BinaryOp::Count)> kBinaryOpNames = {
    "add",
    "sub",
    "mul",
    "div",
    "pow",
    "maximum",
    "minimum",
    "eq",
    "ne",
    "lt",
    "le",
    "gt",
    "ge",
    "threshold_backward",
    "sigmoid_backward",
    "tanh_backward",
    "gelu_backward",
    "gelu_tanh_backward",
    "silu_backward",
    "leaky_relu_backward",
    "elu_backward",
    "hardswish_backward",
    "hardsigmoid_backward",
    "mish_backward"};

// Every kind has a name: a kind added without one leaves a null entry, and this fails.
template <size_t N>
constexpr bool all_named(const std::array<const char*, N>& names) {
  for (const char* n : names) {
    if (n == nullptr) return false;
  }
  return true;
}
static_assert(all_named(kUnaryOpNames), "kUnaryOpNames needs a name for every UnaryOp");
static_assert(all_named(kBinaryOpNames), "kBinaryOpNames needs a name for every BinaryOp");

constexpr const char* name(UnaryOp op) {
  return kUnaryOpNames[static_cast<size_t>(op)];
}
constexpr const char* name(BinaryOp op) {
  return kBinaryOpNames[static_cast<size_t>(op)];
}

// A float32 tensor with a float16/bfloat16 one under +, - or *: the CUDA binary kernel reads both
// as they are and computes in float32, so autocast's mixed residual adds (a float32 stream plus
// a bfloat16 projection) need no float32 copy of the 16-bit side.
constexpr bool is_mixed_float_pair(BinaryOp op, DType a, DType b) {
  const auto half = [](DType d) { return d == kFloat16 || d == kBFloat16; };
  return (op == BinaryOp::Add || op == BinaryOp::Sub || op == BinaryOp::Mul) &&
         ((a == kFloat32 && half(b)) || (half(a) && b == kFloat32));
}

constexpr bool is_comparison(UnaryOp op) {
  return op >= UnaryOp::EqScalar && op < UnaryOp::Count;
}
constexpr bool is_comparison(BinaryOp op) {
  return op >= BinaryOp::Eq && op <= BinaryOp::Ge;
}
// Ops that only make sense on floating inputs (integer inputs are computed in float32).
constexpr bool is_float_only(UnaryOp op) {
  switch (op) {
    case UnaryOp::Exp:
    case UnaryOp::Expm1:
    case UnaryOp::Log:
    case UnaryOp::Log1p:
    case UnaryOp::Sqrt:
    case UnaryOp::Rsqrt:
    case UnaryOp::Reciprocal:
    case UnaryOp::Sigmoid:
    case UnaryOp::Tanh:
    case UnaryOp::Erf:
    case UnaryOp::Sin:
    case UnaryOp::Cos:
    case UnaryOp::Gelu:
    case UnaryOp::GeluTanh:
    case UnaryOp::Silu:
    case UnaryOp::LeakyRelu:
    case UnaryOp::Elu:
    case UnaryOp::Hardswish:
    case UnaryOp::Hardsigmoid:
    case UnaryOp::Softplus:
    case UnaryOp::Mish:
    case UnaryOp::RDivScalar:
    case UnaryOp::PowScalar:
      return true;
    default:
      return false;
  }
}
// Binary ops defined on integer tensors (the rest need floating inputs; the front end casts).
constexpr bool is_integer_op(BinaryOp op) {
  return op == BinaryOp::Add || op == BinaryOp::Sub || op == BinaryOp::Mul || op == BinaryOp::Maximum ||
         op == BinaryOp::Minimum || is_comparison(op);
}
// Binary ops defined on bool tensors: + and maximum are "or", * and minimum "and".
constexpr bool is_logical_op(BinaryOp op) {
  return op == BinaryOp::Add || op == BinaryOp::Mul || op == BinaryOp::Maximum || op == BinaryOp::Minimum ||
         is_comparison(op);
}

namespace detail {
template <typename Op, typename Fn, size_t... I>
void with_op(Op op, Fn& fn, std::index_sequence<I...>) {
  bool found =
      ((static_cast<size_t>(op) == I ? (fn.template operator()<static_cast<Op>(I)>(), true) : false) || ...);
  NABLA_ASSERT(found, "op kind {} is out of range", static_cast<int>(op));
}
}  // namespace detail

// Calls fn.template operator()<kOp>() with kOp == op, for any kind of the enum.
template <typename Fn>
void with_unary_op(UnaryOp op, Fn&& fn) {
  detail::with_op(op, fn, std::make_index_sequence<static_cast<size_t>(UnaryOp::Count)>{});
}
template <typename Fn>
void with_binary_op(BinaryOp op, Fn&& fn) {
  detail::with_op(op, fn, std::make_index_sequence<static_cast<size_t>(BinaryOp::Count)>{});
}

}  // namespace nabla::ops
