// CPU elementwise kernels: one switch over the op kind outside the loop, one dtype dispatch,
// and the per-element lambda inside, so each (op, dtype) pair compiles to its own tight loop.
#include <cmath>

#include "nabla/ops/cpu/kernels.h"
#include "nabla/ops/cpu/loops.h"

namespace nabla::ops::cpu {

namespace {

constexpr double kSqrt1_2 = 0.70710678118654752440;
constexpr double kSqrt2OverPi = 0.79788456080286535588;
constexpr double kInvSqrt2Pi = 0.39894228040143267794;

template <typename C>
C sigmoid_of(C x) {
  return C(1) / (C(1) + std::exp(-x));
}

template <typename C>
C gelu_tanh_of(C x) {
  C inner = C(kSqrt2OverPi) * (x + C(0.044715) * x * x * x);
  return C(0.5) * x * (C(1) + std::tanh(inner));
}

template <typename T, typename Fn>
void run_unary(const Tensor& in, const Tensor& out, Fn fn) {
  auto plan = make_plan<2>({&out, &in});
  elementwise<T, T, 2>(plan, fn);
}

template <typename T, typename Fn>
void run_compare(const Tensor& in, const Tensor& out, Fn fn) {
  auto plan = make_plan<2>({&out, &in});
  elementwise<bool, T, 2>(plan, fn);
}

template <typename T>
void unary_typed(UnaryOp op, const Tensor& in, const Tensor& out, UnaryParams p) {
  using C = compute_t<T>;
  const C a = static_cast<C>(p.a), b = static_cast<C>(p.b);
  constexpr bool kFloat = std::is_floating_point_v<C>;
  switch (op) {
    case UnaryOp::Neg:
      return run_unary<T>(in, out, [](C x) { return static_cast<C>(-x); });
    case UnaryOp::Abs:
      return run_unary<T>(in, out, [](C x) { return static_cast<C>(x < C(0) ? -x : x); });
    case UnaryOp::Sign:
      return run_unary<T>(in, out, [](C x) { return static_cast<C>((C(0) < x) - (x < C(0))); });
    case UnaryOp::Relu:
      return run_unary<T>(in, out, [](C x) { return x > C(0) ? x : C(0); });
    case UnaryOp::AddScalar:
      return run_unary<T>(in, out, [a](C x) { return static_cast<C>(x + a); });
    case UnaryOp::MulScalar:
      return run_unary<T>(in, out, [a](C x) { return static_cast<C>(x * a); });
    case UnaryOp::RSubScalar:
      return run_unary<T>(in, out, [a](C x) { return static_cast<C>(a - x); });
    case UnaryOp::Clamp:
      if constexpr (kFloat) {
        // NaN passes through, as in PyTorch; bounds may be +-inf for "no bound".
        return run_unary<T>(in, out, [a, b](C x) { return std::isnan(x) ? x : std::min(std::max(x, a), b); });
      } else {
        const double lo = p.a, hi = p.b;
        return run_unary<T>(in, out, [lo, hi](C x) {
          double v = std::min(std::max(static_cast<double>(x), lo), hi);
          return static_cast<C>(v);
        });
      }
    case UnaryOp::EqScalar:
      return run_compare<T>(in, out, [p](C x) { return static_cast<double>(x) == p.a; });
    case UnaryOp::NeScalar:
      return run_compare<T>(in, out, [p](C x) { return static_cast<double>(x) != p.a; });
    case UnaryOp::LtScalar:
      return run_compare<T>(in, out, [p](C x) { return static_cast<double>(x) < p.a; });
    case UnaryOp::LeScalar:
      return run_compare<T>(in, out, [p](C x) { return static_cast<double>(x) <= p.a; });
    case UnaryOp::GtScalar:
      return run_compare<T>(in, out, [p](C x) { return static_cast<double>(x) > p.a; });
    case UnaryOp::GeScalar:
      return run_compare<T>(in, out, [p](C x) { return static_cast<double>(x) >= p.a; });
    default:
      break;
  }
  if constexpr (kFloat) {
    switch (op) {
      case UnaryOp::Exp:
        return run_unary<T>(in, out, [](C x) { return std::exp(x); });
      case UnaryOp::Log:
        return run_unary<T>(in, out, [](C x) { return std::log(x); });
      case UnaryOp::Sqrt:
        return run_unary<T>(in, out, [](C x) { return std::sqrt(x); });
      case UnaryOp::Rsqrt:
        return run_unary<T>(in, out, [](C x) { return C(1) / std::sqrt(x); });
      case UnaryOp::Reciprocal:
        return run_unary<T>(in, out, [](C x) { return C(1) / x; });
      case UnaryOp::Sigmoid:
        return run_unary<T>(in, out, [](C x) { return sigmoid_of(x); });
      case UnaryOp::Tanh:
        return run_unary<T>(in, out, [](C x) { return std::tanh(x); });
      case UnaryOp::Gelu:
        return run_unary<T>(in, out, [](C x) { return C(0.5) * x * (C(1) + std::erf(x * C(kSqrt1_2))); });
      case UnaryOp::GeluTanh:
        return run_unary<T>(in, out, [](C x) { return gelu_tanh_of(x); });
      case UnaryOp::Silu:
        return run_unary<T>(in, out, [](C x) { return x * sigmoid_of(x); });
      case UnaryOp::RDivScalar:
        return run_unary<T>(in, out, [a](C x) { return a / x; });
      case UnaryOp::PowScalar:
        if (p.a == 2.0) return run_unary<T>(in, out, [](C x) { return x * x; });
        if (p.a == 0.5) return run_unary<T>(in, out, [](C x) { return std::sqrt(x); });
        return run_unary<T>(in, out, [a](C x) { return std::pow(x, a); });
      default:
        break;
    }
  }
  NABLA_ASSERT(false, "unary op {} not handled for dtype {}", static_cast<int>(op), dtype_name(in.dtype()));
}

template <typename T, typename Fn>
void run_binary(const Tensor& a, const Tensor& b, const Tensor& out, Fn fn) {
  auto plan = make_plan<3>({&out, &a, &b});
  elementwise<T, T, 3>(plan, fn);
}

template <typename T, typename Fn>
void run_binary_compare(const Tensor& a, const Tensor& b, const Tensor& out, Fn fn) {
  auto plan = make_plan<3>({&out, &a, &b});
  elementwise<bool, T, 3>(plan, fn);
}

template <typename T>
void binary_typed(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out, double alpha_d) {
  using C = compute_t<T>;
  const C alpha = static_cast<C>(alpha_d);
  switch (op) {
    case BinaryOp::Add:
      if (alpha_d == 1.0) return run_binary<T>(a, b, out, [](C x, C y) { return static_cast<C>(x + y); });
      return run_binary<T>(a, b, out, [alpha](C x, C y) { return static_cast<C>(x + alpha * y); });
    case BinaryOp::Sub:
      if (alpha_d == 1.0) return run_binary<T>(a, b, out, [](C x, C y) { return static_cast<C>(x - y); });
      return run_binary<T>(a, b, out, [alpha](C x, C y) { return static_cast<C>(x - alpha * y); });
    case BinaryOp::Mul:
      return run_binary<T>(a, b, out, [](C x, C y) { return static_cast<C>(x * y); });
    case BinaryOp::Div:
      if constexpr (std::is_floating_point_v<C>)
        return run_binary<T>(a, b, out, [](C x, C y) { return x / y; });
      break;
    case BinaryOp::Pow:
      if constexpr (std::is_floating_point_v<C>) {
        return run_binary<T>(a, b, out, [](C x, C y) { return std::pow(x, y); });
      }
      break;
    case BinaryOp::Maximum:
      return run_binary<T>(a, b, out, [](C x, C y) {
        if constexpr (std::is_floating_point_v<C>) {
          if (std::isnan(x) || std::isnan(y)) return std::numeric_limits<C>::quiet_NaN();
        }
        return x > y ? x : y;
      });
    case BinaryOp::Minimum:
      return run_binary<T>(a, b, out, [](C x, C y) {
        if constexpr (std::is_floating_point_v<C>) {
          if (std::isnan(x) || std::isnan(y)) return std::numeric_limits<C>::quiet_NaN();
        }
        return x < y ? x : y;
      });
    case BinaryOp::Eq:
      return run_binary_compare<T>(a, b, out, [](C x, C y) { return x == y; });
    case BinaryOp::Ne:
      return run_binary_compare<T>(a, b, out, [](C x, C y) { return x != y; });
    case BinaryOp::Lt:
      return run_binary_compare<T>(a, b, out, [](C x, C y) { return x < y; });
    case BinaryOp::Le:
      return run_binary_compare<T>(a, b, out, [](C x, C y) { return x <= y; });
    case BinaryOp::Gt:
      return run_binary_compare<T>(a, b, out, [](C x, C y) { return x > y; });
    case BinaryOp::Ge:
      return run_binary_compare<T>(a, b, out, [](C x, C y) { return x >= y; });
    default:
      break;
  }
  if constexpr (std::is_floating_point_v<C>) {
    switch (op) {
      case BinaryOp::ThresholdBackward:
        return run_binary<T>(a, b, out, [](C g, C y) { return y > C(0) ? g : C(0); });
      case BinaryOp::SigmoidBackward:
        return run_binary<T>(a, b, out, [](C g, C y) { return g * y * (C(1) - y); });
      case BinaryOp::TanhBackward:
        return run_binary<T>(a, b, out, [](C g, C y) { return g * (C(1) - y * y); });
      case BinaryOp::GeluBackward:
        return run_binary<T>(a, b, out, [](C g, C x) {
          C cdf = C(0.5) * (C(1) + std::erf(x * C(kSqrt1_2)));
          C pdf = C(kInvSqrt2Pi) * std::exp(C(-0.5) * x * x);
          return g * (cdf + x * pdf);
        });
      case BinaryOp::GeluTanhBackward:
        return run_binary<T>(a, b, out, [](C g, C x) {
          C inner = C(kSqrt2OverPi) * (x + C(0.044715) * x * x * x);
          C t = std::tanh(inner);
          C d_inner = C(kSqrt2OverPi) * (C(1) + C(3 * 0.044715) * x * x);
          return g * (C(0.5) * (C(1) + t) + C(0.5) * x * (C(1) - t * t) * d_inner);
        });
      case BinaryOp::SiluBackward:
        return run_binary<T>(a, b, out, [](C g, C x) {
          C s = sigmoid_of(x);
          return g * s * (C(1) + x * (C(1) - s));
        });
      default:
        break;
    }
  }
  NABLA_ASSERT(false, "binary op {} not handled for dtype {}", static_cast<int>(op), dtype_name(a.dtype()));
}

}  // namespace

void unary(UnaryOp op, const Tensor& in, const Tensor& out, UnaryParams params) {
  dispatch<TypeSet::FloatingAndIntegral>(in.dtype(), "unary op",
                                         [&]<typename T>() { unary_typed<T>(op, in, out, params); });
}

void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out, double alpha) {
  if (a.dtype() == kBool) {
    // Logical ops on bool: compute as uint8 and store bool.
    NABLA_CHECK(is_comparison(op) || op == BinaryOp::Add || op == BinaryOp::Mul || op == BinaryOp::Maximum ||
                    op == BinaryOp::Minimum,
                "binary op on bool tensors: only +, *, maximum, minimum and comparisons are defined");
  }
  dispatch(a.dtype(), "binary op", [&]<typename T>() {
    if constexpr (std::is_same_v<T, bool>) {
      auto plan = make_plan<3>({&out, &a, &b});
      switch (op) {
        case BinaryOp::Add:
        case BinaryOp::Maximum:
          return elementwise<bool, bool, 3>(plan, [](bool x, bool y) { return x || y; });
        case BinaryOp::Mul:
        case BinaryOp::Minimum:
          return elementwise<bool, bool, 3>(plan, [](bool x, bool y) { return x && y; });
        case BinaryOp::Eq:
          return elementwise<bool, bool, 3>(plan, [](bool x, bool y) { return x == y; });
        case BinaryOp::Ne:
          return elementwise<bool, bool, 3>(plan, [](bool x, bool y) { return x != y; });
        case BinaryOp::Lt:
          return elementwise<bool, bool, 3>(plan, [](bool x, bool y) { return x < y; });
        case BinaryOp::Le:
          return elementwise<bool, bool, 3>(plan, [](bool x, bool y) { return x <= y; });
        case BinaryOp::Gt:
          return elementwise<bool, bool, 3>(plan, [](bool x, bool y) { return x > y; });
        case BinaryOp::Ge:
          return elementwise<bool, bool, 3>(plan, [](bool x, bool y) { return x >= y; });
        default:
          break;
      }
    } else {
      binary_typed<T>(op, a, b, out, alpha);
    }
  });
}

void where(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out) {
  dispatch(a.dtype(), "where", [&]<typename T>() {
    auto plan = make_plan<4>({&out, &cond, &a, &b});
    for_each_row<4>(plan, [&](std::array<char*, 4> p, int64_t n, const std::array<int64_t, 4>& s) {
      for (int64_t i = 0; i < n; ++i) {
        bool c = *reinterpret_cast<const bool*>(p[1] + i * s[1]);
        *reinterpret_cast<T*>(p[0] + i * s[0]) = *reinterpret_cast<const T*>(p[c ? 2 : 3] + i * s[c ? 2 : 3]);
      }
    });
  });
}

}  // namespace nabla::ops::cpu
