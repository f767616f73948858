// CUDA unary, binary and where kernels. Each (op, dtype) pair is its own functor instance run
// through launch_elementwise (elementwise.cuh), so the op switch happens once on the host and
// the kernel body is straight-line code. The formulas, the NaN rules (clamp passes NaN through,
// maximum/minimum return NaN when either side is NaN, relu maps NaN to 0), integer wrap-around
// and the bool ops follow ops/cpu/elementwise.cpp exactly; math runs in acc_t (float for
// float16/bfloat16) and rounds once on store, as on the CPU.
#include "nabla/ops/cuda/elementwise.cuh"
#include "nabla/ops/cuda/kernels.h"
#include "nabla/ops/cuda/math.cuh"

namespace nabla::ops::cuda {

namespace {

// ---- unary -----------------------------------------------------------------------------------

template <UnaryOp kOp, typename T>
struct UnaryMath {
  using C = acc_t<T>;
  C a, b;         // the op's scalars in the arithmetic type
  double lo, hi;  // integer clamp bounds (clamped in double, as on the CPU)
  int pow_mode;   // PowScalar: 2 squares, 1 takes the square root, 0 calls pow

  __device__ __forceinline__ T operator()(T raw) const { return store_from<T>(compute(load_as_acc(raw))); }

  __device__ __forceinline__ C compute(C x) const {
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
      return static_cast<C>(x + a);
    } else if constexpr (kOp == UnaryOp::MulScalar) {
      return static_cast<C>(x * a);
    } else if constexpr (kOp == UnaryOp::RSubScalar) {
      return static_cast<C>(a - x);
    } else if constexpr (kOp == UnaryOp::Clamp) {
      if constexpr (math::kIsFloat<C>) {
        if (math::isnan(x)) return x;
        C v = x < a ? a : x;   // std::max(x, a)
        return b < v ? b : v;  // std::min(v, b)
      } else {
        double v = static_cast<double>(x);
        v = v < lo ? lo : v;
        v = hi < v ? hi : v;
        return static_cast<C>(v);
      }
    } else if constexpr (kOp == UnaryOp::Exp) {
      return math::exp(x);
    } else if constexpr (kOp == UnaryOp::Log) {
      return math::log(x);
    } else if constexpr (kOp == UnaryOp::Sqrt) {
      return math::sqrt(x);
    } else if constexpr (kOp == UnaryOp::Rsqrt) {
      return C(1) / math::sqrt(x);
    } else if constexpr (kOp == UnaryOp::Reciprocal) {
      return C(1) / x;
    } else if constexpr (kOp == UnaryOp::Sigmoid) {
      return math::sigmoid(x);
    } else if constexpr (kOp == UnaryOp::Tanh) {
      return math::tanh(x);
    } else if constexpr (kOp == UnaryOp::Gelu) {
      return C(0.5) * x * (C(1) + math::erf(x * C(math::kSqrt1_2)));
    } else if constexpr (kOp == UnaryOp::GeluTanh) {
      return math::gelu_tanh(x);
    } else if constexpr (kOp == UnaryOp::Silu) {
      return x * math::sigmoid(x);
    } else if constexpr (kOp == UnaryOp::RDivScalar) {
      return a / x;
    } else {
      static_assert(kOp == UnaryOp::PowScalar, "unhandled unary op");
      if (pow_mode == 2) return x * x;
      if (pow_mode == 1) return math::sqrt(x);
      return math::pow(x, a);
    }
  }
};

// Comparisons with a scalar compare in double, as the CPU does.
template <UnaryOp kOp, typename T>
struct UnaryCompare {
  double a;
  __device__ __forceinline__ bool operator()(T raw) const {
    double x = static_cast<double>(load_as_acc(raw));
    if constexpr (kOp == UnaryOp::EqScalar) return x == a;
    if constexpr (kOp == UnaryOp::NeScalar) return x != a;
    if constexpr (kOp == UnaryOp::LtScalar) return x < a;
    if constexpr (kOp == UnaryOp::LeScalar) return x <= a;
    if constexpr (kOp == UnaryOp::GtScalar) return x > a;
    if constexpr (kOp == UnaryOp::GeScalar) return x >= a;
  }
};

// Calls fn.template operator()<kOp>() for the runtime `op`.
template <typename Fn>
void with_unary_op(UnaryOp op, Fn&& fn) {
  switch (op) {
    case UnaryOp::Neg:
      return fn.template operator()<UnaryOp::Neg>();
    case UnaryOp::Abs:
      return fn.template operator()<UnaryOp::Abs>();
    case UnaryOp::Sign:
      return fn.template operator()<UnaryOp::Sign>();
    case UnaryOp::Exp:
      return fn.template operator()<UnaryOp::Exp>();
    case UnaryOp::Log:
      return fn.template operator()<UnaryOp::Log>();
    case UnaryOp::Sqrt:
      return fn.template operator()<UnaryOp::Sqrt>();
    case UnaryOp::Rsqrt:
      return fn.template operator()<UnaryOp::Rsqrt>();
    case UnaryOp::Reciprocal:
      return fn.template operator()<UnaryOp::Reciprocal>();
    case UnaryOp::Relu:
      return fn.template operator()<UnaryOp::Relu>();
    case UnaryOp::Sigmoid:
      return fn.template operator()<UnaryOp::Sigmoid>();
    case UnaryOp::Tanh:
      return fn.template operator()<UnaryOp::Tanh>();
    case UnaryOp::Gelu:
      return fn.template operator()<UnaryOp::Gelu>();
    case UnaryOp::GeluTanh:
      return fn.template operator()<UnaryOp::GeluTanh>();
    case UnaryOp::Silu:
      return fn.template operator()<UnaryOp::Silu>();
    case UnaryOp::AddScalar:
      return fn.template operator()<UnaryOp::AddScalar>();
    case UnaryOp::MulScalar:
      return fn.template operator()<UnaryOp::MulScalar>();
    case UnaryOp::RSubScalar:
      return fn.template operator()<UnaryOp::RSubScalar>();
    case UnaryOp::RDivScalar:
      return fn.template operator()<UnaryOp::RDivScalar>();
    case UnaryOp::PowScalar:
      return fn.template operator()<UnaryOp::PowScalar>();
    case UnaryOp::Clamp:
      return fn.template operator()<UnaryOp::Clamp>();
    case UnaryOp::EqScalar:
      return fn.template operator()<UnaryOp::EqScalar>();
    case UnaryOp::NeScalar:
      return fn.template operator()<UnaryOp::NeScalar>();
    case UnaryOp::LtScalar:
      return fn.template operator()<UnaryOp::LtScalar>();
    case UnaryOp::LeScalar:
      return fn.template operator()<UnaryOp::LeScalar>();
    case UnaryOp::GtScalar:
      return fn.template operator()<UnaryOp::GtScalar>();
    case UnaryOp::GeScalar:
      return fn.template operator()<UnaryOp::GeScalar>();
  }
  NABLA_ASSERT(false, "unknown unary op {}", static_cast<int>(op));
}

template <typename T>
void unary_typed(UnaryOp op, const Tensor& in, const Tensor& out, UnaryParams p) {
  using C = acc_t<T>;
  with_unary_op(op, [&]<UnaryOp kOp>() {
    if constexpr (is_comparison(kOp)) {
      launch_elementwise<bool, T>(out, {&in}, UnaryCompare<kOp, T>{p.a});
    } else if constexpr (is_float_only(kOp) && !math::kIsFloat<C>) {
      NABLA_ASSERT(false, "unary op {} reached the CUDA kernel with integer dtype {}", static_cast<int>(kOp),
                   dtype_name(in.dtype()));
    } else {
      int pow_mode = p.a == 2.0 ? 2 : p.a == 0.5 ? 1 : 0;
      UnaryMath<kOp, T> fn{static_cast<C>(p.a), static_cast<C>(p.b), p.a, p.b, pow_mode};
      launch_elementwise<T, T>(out, {&in}, fn);
    }
  });
}

// ---- binary ----------------------------------------------------------------------------------

template <BinaryOp kOp, typename T>
struct BinaryMath {
  using C = acc_t<T>;
  C alpha;

  __device__ __forceinline__ T operator()(T ra, T rb) const {
    return store_from<T>(compute(load_as_acc(ra), load_as_acc(rb)));
  }

  __device__ __forceinline__ C compute(C x, C y) const {
    if constexpr (kOp == BinaryOp::Add) {
      return static_cast<C>(x + alpha * y);
    } else if constexpr (kOp == BinaryOp::Sub) {
      return static_cast<C>(x - alpha * y);
    } else if constexpr (kOp == BinaryOp::Mul) {
      return static_cast<C>(x * y);
    } else if constexpr (kOp == BinaryOp::Div) {
      return x / y;
    } else if constexpr (kOp == BinaryOp::Pow) {
      return math::pow(x, y);
    } else if constexpr (kOp == BinaryOp::Maximum || kOp == BinaryOp::Minimum) {
      if (math::isnan(x) || math::isnan(y)) return math::quiet_nan<C>();
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
      C cdf = C(0.5) * (C(1) + math::erf(y * C(math::kSqrt1_2)));
      C pdf = C(math::kInvSqrt2Pi) * math::exp(C(-0.5) * y * y);
      return x * (cdf + y * pdf);
    } else if constexpr (kOp == BinaryOp::GeluTanhBackward) {
      C inner = C(math::kSqrt2OverPi) * (y + C(0.044715) * y * y * y);
      C t = math::tanh(inner);
      C d_inner = C(math::kSqrt2OverPi) * (C(1) + C(3 * 0.044715) * y * y);
      return x * (C(0.5) * (C(1) + t) + C(0.5) * y * (C(1) - t * t) * d_inner);
    } else {
      static_assert(kOp == BinaryOp::SiluBackward, "unhandled binary op");
      C s = math::sigmoid(y);
      return x * s * (C(1) + y * (C(1) - s));
    }
  }
};

template <BinaryOp kOp, typename T>
struct BinaryCompare {
  __device__ __forceinline__ bool operator()(T ra, T rb) const {
    auto x = load_as_acc(ra), y = load_as_acc(rb);
    if constexpr (kOp == BinaryOp::Eq) return x == y;
    if constexpr (kOp == BinaryOp::Ne) return x != y;
    if constexpr (kOp == BinaryOp::Lt) return x < y;
    if constexpr (kOp == BinaryOp::Le) return x <= y;
    if constexpr (kOp == BinaryOp::Gt) return x > y;
    if constexpr (kOp == BinaryOp::Ge) return x >= y;
  }
};

// Logical ops on bool: + and maximum are "or", * and minimum are "and".
template <BinaryOp kOp>
struct BoolBinary {
  __device__ __forceinline__ bool operator()(bool x, bool y) const {
    if constexpr (kOp == BinaryOp::Add || kOp == BinaryOp::Maximum) return x || y;
    if constexpr (kOp == BinaryOp::Mul || kOp == BinaryOp::Minimum) return x && y;
    if constexpr (kOp == BinaryOp::Eq) return x == y;
    if constexpr (kOp == BinaryOp::Ne) return x != y;
    if constexpr (kOp == BinaryOp::Lt) return x < y;
    if constexpr (kOp == BinaryOp::Le) return x <= y;
    if constexpr (kOp == BinaryOp::Gt) return x > y;
    if constexpr (kOp == BinaryOp::Ge) return x >= y;
  }
};

template <typename Fn>
void with_binary_op(BinaryOp op, Fn&& fn) {
  switch (op) {
    case BinaryOp::Add:
      return fn.template operator()<BinaryOp::Add>();
    case BinaryOp::Sub:
      return fn.template operator()<BinaryOp::Sub>();
    case BinaryOp::Mul:
      return fn.template operator()<BinaryOp::Mul>();
    case BinaryOp::Div:
      return fn.template operator()<BinaryOp::Div>();
    case BinaryOp::Pow:
      return fn.template operator()<BinaryOp::Pow>();
    case BinaryOp::Maximum:
      return fn.template operator()<BinaryOp::Maximum>();
    case BinaryOp::Minimum:
      return fn.template operator()<BinaryOp::Minimum>();
    case BinaryOp::Eq:
      return fn.template operator()<BinaryOp::Eq>();
    case BinaryOp::Ne:
      return fn.template operator()<BinaryOp::Ne>();
    case BinaryOp::Lt:
      return fn.template operator()<BinaryOp::Lt>();
    case BinaryOp::Le:
      return fn.template operator()<BinaryOp::Le>();
    case BinaryOp::Gt:
      return fn.template operator()<BinaryOp::Gt>();
    case BinaryOp::Ge:
      return fn.template operator()<BinaryOp::Ge>();
    case BinaryOp::ThresholdBackward:
      return fn.template operator()<BinaryOp::ThresholdBackward>();
    case BinaryOp::SigmoidBackward:
      return fn.template operator()<BinaryOp::SigmoidBackward>();
    case BinaryOp::TanhBackward:
      return fn.template operator()<BinaryOp::TanhBackward>();
    case BinaryOp::GeluBackward:
      return fn.template operator()<BinaryOp::GeluBackward>();
    case BinaryOp::GeluTanhBackward:
      return fn.template operator()<BinaryOp::GeluTanhBackward>();
    case BinaryOp::SiluBackward:
      return fn.template operator()<BinaryOp::SiluBackward>();
  }
  NABLA_ASSERT(false, "unknown binary op {}", static_cast<int>(op));
}

// Ops defined on integer tensors too (the rest need floating inputs; the front end casts).
constexpr bool integer_ok(BinaryOp op) {
  return op == BinaryOp::Add || op == BinaryOp::Sub || op == BinaryOp::Mul || op == BinaryOp::Maximum ||
         op == BinaryOp::Minimum || is_comparison(op);
}

constexpr bool bool_ok(BinaryOp op) {
  return op == BinaryOp::Add || op == BinaryOp::Mul || op == BinaryOp::Maximum || op == BinaryOp::Minimum ||
         is_comparison(op);
}

template <typename T>
void binary_typed(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out, double alpha) {
  using C = acc_t<T>;
  with_binary_op(op, [&]<BinaryOp kOp>() {
    if constexpr (std::is_same_v<T, bool>) {
      if constexpr (bool_ok(kOp)) {
        launch_elementwise<bool, bool, bool>(out, {&a, &b}, BoolBinary<kOp>{});
      } else {
        NABLA_ASSERT(false, "binary op {} reached the CUDA kernel with bool inputs", static_cast<int>(kOp));
      }
    } else if constexpr (is_comparison(kOp)) {
      launch_elementwise<bool, T, T>(out, {&a, &b}, BinaryCompare<kOp, T>{});
    } else if constexpr (!math::kIsFloat<C> && !integer_ok(kOp)) {
      NABLA_ASSERT(false, "binary op {} not handled for dtype {}", static_cast<int>(kOp),
                   dtype_name(a.dtype()));
    } else {
      launch_elementwise<T, T, T>(out, {&a, &b}, BinaryMath<kOp, T>{static_cast<C>(alpha)});
    }
  });
}

// ---- where -----------------------------------------------------------------------------------

template <typename U>
struct Select {
  __device__ __forceinline__ U operator()(bool c, U x, U y) const { return c ? x : y; }
};

}  // namespace

void unary(UnaryOp op, const Tensor& in, const Tensor& out, UnaryParams params) {
  dispatch_device<TypeSet::FloatingAndIntegral>(in.dtype(), "unary op",
                                                [&]<typename T>() { unary_typed<T>(op, in, out, params); });
}

void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out, double alpha) {
  if (a.dtype() == kBool) {
    NABLA_CHECK(bool_ok(op),
                "binary op on bool tensors: only +, *, maximum, minimum and comparisons are defined");
  }
  dispatch_device(a.dtype(), "binary op", [&]<typename T>() { binary_typed<T>(op, a, b, out, alpha); });
}

void where(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out) {
  // Only bits move, so one kernel per element size serves every dtype.
  dispatch_bits(a.itemsize(), [&]<typename U>() {
    launch_elementwise<U, bool, U, U>(out, {&cond, &a, &b}, Select<U>{});
  });
}

}  // namespace nabla::ops::cuda
