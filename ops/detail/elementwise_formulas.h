// Internal (ops). Every elementwise formula, written once for both backends: this header
// compiles as host C++ (ops/cpu/elementwise.cpp) and as CUDA (ops/cuda/elementwise/elementwise.cu).
//
// Note [One formula per op]: a formula takes and returns the arithmetic type `C` (compute_t on the
// CPU, opmath_t on CUDA: float for float16/bfloat16, the type itself otherwise); the backends
// only load, call and store. The op kind is a template argument, so each (op, dtype) pair
// compiles to its own straight-line loop or kernel, and with_unary_op/with_binary_op
// (op_kinds.h) make the dispatch table from the enum: an op added to UnaryOp or BinaryOp without
// a formula here fails to compile in both builds. The NaN rules are PyTorch's: clamp passes NaN
// through, maximum and minimum return NaN when either side is NaN, relu maps NaN to 0.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "nabla/core/host_device.h"
#include "nabla/ops/detail/op_enums.h"

namespace nabla::ops::formula {

inline constexpr double kSqrt1_2 = 0.70710678118654752440;
inline constexpr double kSqrt2OverPi = 0.79788456080286535588;
inline constexpr double kInvSqrt2Pi = 0.39894228040143267794;

template <typename C>
inline constexpr bool kIsFloat = std::is_floating_point_v<C>;

// The math library of whichever side compiles: <cmath> on the host; on the device the CUDA
// functions, whose float overloads are called explicitly so float never goes through double.
#if defined(__CUDA_ARCH__)
#define NABLA_MATH_1(name)                  \
  template <typename C>                     \
  NABLA_HOST_DEVICE C name(C x) {           \
    if constexpr (std::is_same_v<C, float>) \
      return ::name##f(x);                  \
    else                                    \
      return ::name(x);                     \
  }
#else
#define NABLA_MATH_1(name)        \
  template <typename C>           \
  NABLA_HOST_DEVICE C name(C x) { \
    return std::name(x);          \
  }
#endif
NABLA_MATH_1(exp)
NABLA_MATH_1(expm1)
NABLA_MATH_1(log)
NABLA_MATH_1(log1p)
NABLA_MATH_1(sqrt)
NABLA_MATH_1(tanh)
NABLA_MATH_1(erf)
NABLA_MATH_1(sin)
NABLA_MATH_1(cos)
#undef NABLA_MATH_1

template <typename C>
NABLA_HOST_DEVICE C pow(C x, C y) {
#if defined(__CUDA_ARCH__)
  if constexpr (std::is_same_v<C, float>)
    return ::powf(x, y);
  else
    return ::pow(x, y);
#else
  return std::pow(x, y);
#endif
}

template <typename C>
NABLA_HOST_DEVICE C abs(C x) {
#if defined(__CUDA_ARCH__)
  if constexpr (std::is_same_v<C, float>)
    return ::fabsf(x);
  else
    return ::fabs(x);
#else
  return std::abs(x);
#endif
}

template <typename C>
NABLA_HOST_DEVICE bool isnan(C x) {
  if constexpr (kIsFloat<C>)
    return x != x;
  else
    return false;
}

template <typename C>
NABLA_HOST_DEVICE C quiet_nan() {
  return C(NAN);
}

template <typename C>
NABLA_HOST_DEVICE C sigmoid(C x) {
  return C(1) / (C(1) + exp(-x));
}

// min(max(x, 0), 6), NaN kept.
template <typename C>
NABLA_HOST_DEVICE C relu6(C x) {
  if (isnan(x)) return x;
  return x < C(0) ? C(0) : (x > C(6) ? C(6) : x);
}

// PyTorch's softplus: log(1 + exp(beta x)) / beta, and x itself where beta x > threshold (where
// the two agree to the type's precision, and exp would overflow).
template <typename C>
NABLA_HOST_DEVICE C softplus(C x, C beta, C threshold) {
  const C bx = beta * x;
  return bx > threshold ? x : log1p(exp(bx)) / beta;
}

// The scalars of a unary op (UnaryParams), ready in the arithmetic type.
template <typename C>
struct UnaryScalars {
  C a{}, b{};
  double lo = 0, hi = 0;  // integer clamp bounds: integers clamp in double
  int pow_mode = 0;       // PowScalar: 2 squares, 1 takes the square root, 0 calls pow

  static UnaryScalars from(UnaryParams p) {
    return {static_cast<C>(p.a), static_cast<C>(p.b), p.a, p.b, p.a == 2.0 ? 2 : p.a == 0.5 ? 1 : 0};
  }
};

// y = op(x) for every UnaryOp that is not a comparison.
template <UnaryOp kOp, typename C>
NABLA_HOST_DEVICE C unary(C x, const UnaryScalars<C>& s) {
  if constexpr (kOp == UnaryOp::Neg) {
    return static_cast<C>(-x);
  } else if constexpr (kOp == UnaryOp::Abs) {
    if constexpr (std::is_unsigned_v<C>)
      return x;
    else
      return static_cast<C>(x < C(0) ? -x : x);
  } else if constexpr (kOp == UnaryOp::Sign) {
    if constexpr (std::is_unsigned_v<C>)
      return static_cast<C>(C(0) < x);
    else
      return static_cast<C>((C(0) < x) - (x < C(0)));
  } else if constexpr (kOp == UnaryOp::Relu) {
    return x > C(0) ? x : C(0);
  } else if constexpr (kOp == UnaryOp::AddScalar) {
    return static_cast<C>(x + s.a);
  } else if constexpr (kOp == UnaryOp::MulScalar) {
    return static_cast<C>(x * s.a);
  } else if constexpr (kOp == UnaryOp::RSubScalar) {
    return static_cast<C>(s.a - x);
  } else if constexpr (kOp == UnaryOp::Clamp) {
    if constexpr (kIsFloat<C>) {
      if (isnan(x)) return x;
      C v = x < s.a ? s.a : x;   // max(x, a)
      return s.b < v ? s.b : v;  // min(v, b)
    } else {
      double v = static_cast<double>(x);
      v = v < s.lo ? s.lo : v;
      v = s.hi < v ? s.hi : v;
      return static_cast<C>(v);
    }
  } else if constexpr (kOp == UnaryOp::Exp) {
    return exp(x);
  } else if constexpr (kOp == UnaryOp::Expm1) {
    return expm1(x);
  } else if constexpr (kOp == UnaryOp::Log) {
    return log(x);
  } else if constexpr (kOp == UnaryOp::Log1p) {
    return log1p(x);
  } else if constexpr (kOp == UnaryOp::Sqrt) {
    return sqrt(x);
  } else if constexpr (kOp == UnaryOp::Rsqrt) {
    return C(1) / sqrt(x);
  } else if constexpr (kOp == UnaryOp::Reciprocal) {
    return C(1) / x;
  } else if constexpr (kOp == UnaryOp::Sigmoid) {
    return sigmoid(x);
  } else if constexpr (kOp == UnaryOp::Tanh) {
    return tanh(x);
  } else if constexpr (kOp == UnaryOp::Erf) {
    return erf(x);
  } else if constexpr (kOp == UnaryOp::Sin) {
    return sin(x);
  } else if constexpr (kOp == UnaryOp::Cos) {
    return cos(x);
  } else if constexpr (kOp == UnaryOp::Gelu) {
    return C(0.5) * x * (C(1) + erf(x * C(kSqrt1_2)));
  } else if constexpr (kOp == UnaryOp::GeluTanh) {
    C inner = C(kSqrt2OverPi) * (x + C(0.044715) * x * x * x);
    return C(0.5) * x * (C(1) + tanh(inner));
  } else if constexpr (kOp == UnaryOp::Silu) {
    return x * sigmoid(x);
  } else if constexpr (kOp == UnaryOp::LeakyRelu) {
    return x > C(0) ? x : x * s.a;
  } else if constexpr (kOp == UnaryOp::Elu) {
    return x > C(0) ? x : s.a * expm1(x);
  } else if constexpr (kOp == UnaryOp::Hardswish) {
    return x * relu6(x + C(3)) / C(6);
  } else if constexpr (kOp == UnaryOp::Hardsigmoid) {
    return relu6(x + C(3)) / C(6);
  } else if constexpr (kOp == UnaryOp::Softplus) {
    return softplus(x, s.a, s.b);
  } else if constexpr (kOp == UnaryOp::Mish) {
    return x * tanh(softplus(x, C(1), C(20)));
  } else if constexpr (kOp == UnaryOp::RDivScalar) {
    return s.a / x;
  } else {
    static_assert(kOp == UnaryOp::PowScalar, "a UnaryOp without a formula");
    if (s.pow_mode == 2) return x * x;
    if (s.pow_mode == 1) return sqrt(x);
    return pow(x, s.a);
  }
}

// x <op> a for the comparisons with a scalar, which compare in double on both backends.
template <UnaryOp kOp>
NABLA_HOST_DEVICE bool compare_scalar(double x, double a) {
  if constexpr (kOp == UnaryOp::EqScalar)
    return x == a;
  else if constexpr (kOp == UnaryOp::NeScalar)
    return x != a;
  else if constexpr (kOp == UnaryOp::LtScalar)
    return x < a;
  else if constexpr (kOp == UnaryOp::LeScalar)
    return x <= a;
  else if constexpr (kOp == UnaryOp::GtScalar)
    return x > a;
  else {
    static_assert(kOp == UnaryOp::GeScalar, "a scalar comparison without a formula");
    return x >= a;
  }
}

// out = op(x, y) for every BinaryOp that is not a comparison. The fused gradients take
// (grad, saved): x is the incoming gradient, y the saved input or output.
template <BinaryOp kOp, typename C>
NABLA_HOST_DEVICE C binary(C x, C y, C alpha) {
  if constexpr (kOp == BinaryOp::Add) {
    return static_cast<C>(x + alpha * y);
  } else if constexpr (kOp == BinaryOp::Sub) {
    return static_cast<C>(x - alpha * y);
  } else if constexpr (kOp == BinaryOp::Mul) {
    return static_cast<C>(x * y);
  } else if constexpr (kOp == BinaryOp::Div) {
    return x / y;
  } else if constexpr (kOp == BinaryOp::Pow) {
    return pow(x, y);
  } else if constexpr (kOp == BinaryOp::Maximum || kOp == BinaryOp::Minimum) {
    if (isnan(x) || isnan(y)) return quiet_nan<C>();
    if constexpr (kOp == BinaryOp::Maximum)
      return x > y ? x : y;
    else
      return x < y ? x : y;
  } else if constexpr (kOp == BinaryOp::ThresholdBackward) {
    return y > C(0) ? x : C(0);
  } else if constexpr (kOp == BinaryOp::SigmoidBackward) {
    return x * y * (C(1) - y);
  } else if constexpr (kOp == BinaryOp::TanhBackward) {
    return x * (C(1) - y * y);
  } else if constexpr (kOp == BinaryOp::GeluBackward) {
    C cdf = C(0.5) * (C(1) + erf(y * C(kSqrt1_2)));
    C pdf = C(kInvSqrt2Pi) * exp(C(-0.5) * y * y);
    return x * (cdf + y * pdf);
  } else if constexpr (kOp == BinaryOp::GeluTanhBackward) {
    C inner = C(kSqrt2OverPi) * (y + C(0.044715) * y * y * y);
    C t = tanh(inner);
    C d_inner = C(kSqrt2OverPi) * (C(1) + C(3 * 0.044715) * y * y);
    return x * (C(0.5) * (C(1) + t) + C(0.5) * y * (C(1) - t * t) * d_inner);
  } else if constexpr (kOp == BinaryOp::SiluBackward) {
    C sig = sigmoid(y);
    return x * sig * (C(1) + y * (C(1) - sig));
  } else if constexpr (kOp == BinaryOp::LeakyReluBackward) {
    return y > C(0) ? x : x * alpha;
  } else if constexpr (kOp == BinaryOp::EluBackward) {
    return y <= C(0) ? x * alpha * exp(y) : x;  // a NaN input passes the gradient, as in PyTorch
  } else if constexpr (kOp == BinaryOp::HardswishBackward) {
    if (y < C(-3)) return C(0);
    return y <= C(3) ? x * (y / C(3) + C(0.5)) : x;
  } else if constexpr (kOp == BinaryOp::HardsigmoidBackward) {
    return y > C(-3) && y < C(3) ? x / C(6) : C(0);
  } else {
    static_assert(kOp == BinaryOp::MishBackward, "a BinaryOp without a formula");
    const C t = tanh(softplus(y, C(1), C(20)));
    return x * (t + y * sigmoid(y) * (C(1) - t * t));
  }
}

// x <op> y for the comparisons, in the arithmetic type.
template <BinaryOp kOp, typename C>
NABLA_HOST_DEVICE bool compare(C x, C y) {
  if constexpr (kOp == BinaryOp::Eq)
    return x == y;
  else if constexpr (kOp == BinaryOp::Ne)
    return x != y;
  else if constexpr (kOp == BinaryOp::Lt)
    return x < y;
  else if constexpr (kOp == BinaryOp::Le)
    return x <= y;
  else if constexpr (kOp == BinaryOp::Gt)
    return x > y;
  else {
    static_assert(kOp == BinaryOp::Ge, "a comparison without a formula");
    return x >= y;
  }
}

// The ops on bool tensors: + and maximum are "or", * and minimum are "and", and comparisons.
template <BinaryOp kOp>
NABLA_HOST_DEVICE bool logical(bool x, bool y) {
  if constexpr (kOp == BinaryOp::Add || kOp == BinaryOp::Maximum)
    return x || y;
  else if constexpr (kOp == BinaryOp::Mul || kOp == BinaryOp::Minimum)
    return x && y;
  else
    return compare<kOp>(x, y);
}

}  // namespace nabla::ops::formula
