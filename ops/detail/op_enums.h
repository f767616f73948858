// Internal. The elementwise op kinds and their scalar parameters, and nothing else: this header
// is read by the host and CUDA builds through op_kinds.h, and by the step compiler's run-time
// compiles (NVRTC, ops/cuda/fusion), which have no standard library beyond what the prelude gives
// them, through detail/elementwise_formulas.h. Names, predicates and the kind-to-template helpers
// live in op_kinds.h.
#pragma once

#include <cstdint>

namespace nabla::ops {

enum class UnaryOp : uint8_t {
  Neg,
  Abs,
  Sign,
  Exp,
  Expm1,  // exp(x) - 1, exact near 0
  Log,
  Log1p,  // log(1 + x), exact near 0
  Sqrt,
  Rsqrt,
  Reciprocal,
  Relu,
  Sigmoid,
  Tanh,
  Erf,
  Sin,
  Cos,
  Gelu,
  GeluTanh,
  Silu,
  LeakyRelu,    // x > 0 ? x : a * x
  Elu,          // x > 0 ? x : a * (exp(x) - 1)
  Hardswish,    // x * relu6(x + 3) / 6
  Hardsigmoid,  // relu6(x + 3) / 6
  Softplus,     // log(1 + exp(a * x)) / a, or x where a * x > b
  Mish,         // x * tanh(softplus(x))
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
  Count,  // not an op: the number of them
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
  ThresholdBackward,    // grad * (y > 0)
  SigmoidBackward,      // grad * y * (1 - y)
  TanhBackward,         // grad * (1 - y^2)
  GeluBackward,         // grad * d/dx gelu(x), exact (erf) form
  GeluTanhBackward,     // grad * d/dx gelu(x), tanh approximation
  SiluBackward,         // grad * d/dx silu(x)
  LeakyReluBackward,    // x > 0 ? grad : alpha * grad (alpha the slope)
  EluBackward,          // x > 0 ? grad : alpha * exp(x) * grad
  HardswishBackward,    // grad * d/dx hardswish(x)
  HardsigmoidBackward,  // -3 < x < 3 ? grad / 6 : 0
  MishBackward,         // grad * d/dx mish(x)
  Count,                // not an op: the number of them
};

}  // namespace nabla::ops
