// Internal. The elementwise op kinds shared by the CPU and CUDA backends: one entry point per
// family (unary, binary) takes the kind, so a backend adds an op by adding a case.
#pragma once

#include <cstdint>

namespace nabla::ops {

enum class UnaryOp : uint8_t {
  Neg,
  Abs,
  Sign,
  Exp,
  Log,
  Sqrt,
  Rsqrt,
  Reciprocal,
  Relu,
  Sigmoid,
  Tanh,
  Gelu,
  GeluTanh,
  Silu,
  // With scalar parameters (UnaryParams::a, ::b):
  AddScalar,   // x + a
  MulScalar,   // x * a
  RSubScalar,  // a - x
  RDivScalar,  // a / x
  PowScalar,   // x ^ a
  Clamp,       // min(max(x, a), b)
  // Comparisons with a scalar, giving bool:
  EqScalar,
  NeScalar,
  LtScalar,
  LeScalar,
  GtScalar,
  GeScalar,
};

struct UnaryParams {
  double a = 0;
  double b = 0;
};

enum class BinaryOp : uint8_t {
  Add,  // a + alpha * b
  Sub,  // a - alpha * b
  Mul,
  Div,
  Pow,
  Maximum,
  Minimum,
  // Comparisons, giving bool:
  Eq,
  Ne,
  Lt,
  Le,
  Gt,
  Ge,
  // Fused gradients: (grad, saved) -> grad_input
  ThresholdBackward,  // grad * (y > 0)
  SigmoidBackward,    // grad * y * (1 - y)
  TanhBackward,       // grad * (1 - y^2)
  GeluBackward,       // grad * d/dx gelu(x), exact (erf) form
  GeluTanhBackward,   // grad * d/dx gelu(x), tanh approximation
  SiluBackward,       // grad * d/dx silu(x)
};

constexpr bool is_comparison(UnaryOp op) {
  return op >= UnaryOp::EqScalar;
}
constexpr bool is_comparison(BinaryOp op) {
  return op >= BinaryOp::Eq && op <= BinaryOp::Ge;
}
// Ops that only make sense on floating inputs (integer inputs are computed in float32).
constexpr bool is_float_only(UnaryOp op) {
  return op == UnaryOp::Exp || op == UnaryOp::Log || op == UnaryOp::Sqrt || op == UnaryOp::Rsqrt ||
         op == UnaryOp::Reciprocal || op == UnaryOp::Sigmoid || op == UnaryOp::Tanh || op == UnaryOp::Gelu ||
         op == UnaryOp::GeluTanh || op == UnaryOp::Silu || op == UnaryOp::RDivScalar ||
         op == UnaryOp::PowScalar;
}

}  // namespace nabla::ops
