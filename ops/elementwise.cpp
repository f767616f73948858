// Elementwise front ends: validation, type promotion, output layout, device dispatch and the
// backward formulas. Kernels live in ops/cpu/elementwise.cpp and ops/cuda/elementwise/elementwise.cu.
#include "nabla/ops/elementwise.h"

#include <cmath>
#include <limits>

#include "nabla/ops/autograd/detail/no_double_backward.h"
#include "nabla/ops/autograd/detail/pointwise_node.h"
#include "nabla/ops/autograd/function.h"
#include "nabla/ops/copy.h"
#include "nabla/ops/cpu/kernels.h"
#include "nabla/ops/cuda/elementwise/kernels.h"
#include "nabla/ops/detail/alias.h"
#include "nabla/ops/detail/autocast_policy.h"
#include "nabla/ops/detail/dispatch.h"
#include "nabla/ops/factory.h"
#include "nabla/ops/fusion/recorder.h"
#include "nabla/ops/reduce.h"

namespace nabla {

using autograd::BackwardContext;
using ops::BinaryOp;
using ops::UnaryOp;
using ops::UnaryParams;

namespace {

// autograd::record for a pointwise op's node, which the engine runs as soon as it is ready (Note
// [Pointwise nodes first] in ops/autograd/engine.cpp).
void record_pointwise(const char* name, const TensorList& inputs, const TensorList& outputs,
                      const TensorList& save, autograd::BackwardFn backward) {
  const autograd::detail::PointwiseNodeScope pointwise;
  autograd::record(name, inputs, outputs, save, std::move(backward));
}

// Outputs follow the layout of the first input that has the full output shape, so
// channels_last activations stay channels_last.
MemoryFormat output_format(const Shape& sizes, std::initializer_list<const Tensor*> inputs) {
  if (sizes.size() != 4) return MemoryFormat::Contiguous;
  for (const Tensor* t : inputs) {
    if (t->sizes() == sizes) return t->suggest_memory_format();
  }
  return MemoryFormat::Contiguous;
}

// The output of a pointwise op: channels_last as output_format says; else, when every input of
// the full output shape has one same non-contiguous dense layout (a transposed view's, a gradient
// in its input's layout), that layout, so the output goes back through the views its inputs came
// from as a view (Note [Gradients in their input's layout] in ops/detail/alias.h); else contiguous.
Tensor empty_output(const Shape& sizes, DType dtype, Device device,
                    std::initializer_list<const Tensor*> inputs) {
  const MemoryFormat format = output_format(sizes, inputs);
  const TensorOptions options{.dtype = dtype, .device = device, .memory_format = format};
  if (format != MemoryFormat::Contiguous) return Tensor::empty(sizes, options);
  const Shape* shared = nullptr;
  for (const Tensor* t : inputs) {
    if (t->sizes() != sizes) continue;
    if (shared != nullptr && *shared != t->strides()) return Tensor::empty(sizes, options);
    shared = &t->strides();
  }
  if (shared == nullptr || *shared == contiguous_strides(sizes) ||
      !is_non_overlapping_and_dense(sizes, *shared))
    return Tensor::empty(sizes, options);
  return ops::empty_strided(sizes, *shared, options);
}

Tensor cast_to(const Tensor& t, DType dtype) {
  return t.dtype() == dtype ? t : t.to(dtype);
}

// Forward only: out = op(x), computed in x's dtype (integers go to float32 for float-only ops).
Tensor unary_forward(UnaryOp op, const Tensor& x_in, const char* name, UnaryParams p = {}) {
  ops::check_defined(name, x_in, "self");
  NABLA_CHECK(x_in.dtype() != kBool || ops::is_comparison(op), "{}: not defined for bool tensors ({})", name,
              describe(x_in));
  Tensor x = ops::is_float_only(op) && !x_in.is_floating_point() ? x_in.to(kFloat32) : x_in;
  DType out_dtype = ops::is_comparison(op) ? kBool : x.dtype();
  Tensor out = empty_output(x.sizes(), out_dtype, x.device(), {&x});
  // A compiled step records the op instead (Note [Deferred launches]); what it declines runs now.
  nabla::dispatch_pointwise(
      ops::name(op), x, [&] { ops::cpu::unary(op, x, out, p); },
      [&] {
        if (ops::fusion::record_unary(op, x, out, p)) return;
        flush_deferred();
        ops::cuda::unary(op, x, out, p);
      });
  return out;
}

DType binary_dtype(BinaryOp op, const Tensor& a, const Tensor& b) {
  DType common = promote_types(a.dtype(), b.dtype());
  // True division and pow are floating operations even on integers.
  if ((op == BinaryOp::Div || op == BinaryOp::Pow) && !is_floating(common)) return kFloat32;
  return common;
}

// Forward only: out = op(a, b) with broadcasting, computed in the promoted dtype.
Tensor binary_forward(BinaryOp op, const Tensor& a_in, const Tensor& b_in, const char* name,
                      double alpha = 1.0) {
  ops::check_defined(name, a_in, "self");
  ops::check_defined(name, b_in, "other");
  ops::check_same_device(name, {a_in, b_in});
  // Autocast: widest. Every binary front end comes here, and this promotion is that rule.
  DType common = binary_dtype(op, a_in, b_in);
  // CUDA reads a float32 / 16-bit pair as it is (is_mixed_float_pair): no float32 copy.
  const bool mixed =
      a_in.is_cuda() && common == kFloat32 && ops::is_mixed_float_pair(op, a_in.dtype(), b_in.dtype());
  Tensor a = mixed ? a_in : cast_to(a_in, common), b = mixed ? b_in : cast_to(b_in, common);
  Shape sizes = broadcast_shapes(a.sizes(), b.sizes(), name);
  DType out_dtype = ops::is_comparison(op) ? kBool : common;
  Tensor out = empty_output(sizes, out_dtype, a.device(), {&a, &b});
  nabla::dispatch_pointwise(
      ops::name(op), a, [&] { ops::cpu::binary(op, a, b, out, alpha); },
      [&] {
        if (ops::fusion::record_binary(op, a, b, out, alpha)) return;
        flush_deferred();
        ops::cuda::binary(op, a, b, out, alpha);
      });
  return out;
}

// A fused backward kernel: its result has no derivative of its own, so double backward through
// it fails with a clear message instead of silently dropping terms.
Tensor fused_backward(BinaryOp op, const Tensor& grad, const Tensor& saved, const char* name,
                      double alpha = 1.0) {
  Tensor out;
  {
    NoGradGuard no_grad;
    out = binary_forward(op, grad, saved, name, alpha);
  }
  autograd::refuse_double_backward(name, {grad, saved}, {out});
  return out;
}

// What a unary op's backward reads: nothing, its input x, or its output y (as c.saved[0]).
enum class Save : uint8_t { nothing, input, output };

template <typename Backward>
Tensor unary_op(UnaryOp op, const Tensor& x, const char* name, const char* node, Save save, Backward backward,
                UnaryParams p = {}) {
  Tensor y = unary_forward(op, x, name, p);
  if (autograd::needs_grad({x})) {
    TensorList saved;
    if (save == Save::input) saved.push_back(x);
    if (save == Save::output) saved.push_back(y);
    record_pointwise(node, {x}, {y}, saved, backward);
  }
  return y;
}

DType scalar_op_dtype(DType t, double s) {
  if (is_floating(t)) return t;
  bool whole = std::isfinite(s) && std::floor(s) == s;
  if (!whole) return kFloat32;
  return t == kBool ? kInt64 : t;
}

Tensor scalar_op(UnaryOp op, const Tensor& x, double s, const char* name) {
  ops::check_defined(name, x, "self");
  DType dtype = scalar_op_dtype(x.dtype(), s);
  Tensor xc = cast_to(x, dtype);
  Tensor y = unary_forward(op, xc, name, {.a = s});
  if (!autograd::needs_grad({x})) return y;
  switch (op) {
    case UnaryOp::AddScalar:
      record_pointwise("AddScalarBackward", {x}, {y}, {},
                       [](BackwardContext& c) { return TensorList{c.grad()}; });
      break;
    case UnaryOp::MulScalar:
      record_pointwise("MulScalarBackward", {x}, {y}, {},
                       [s](BackwardContext& c) { return TensorList{c.grad() * s}; });
      break;
    case UnaryOp::RSubScalar:
      record_pointwise("RSubScalarBackward", {x}, {y}, {},
                       [](BackwardContext& c) { return TensorList{-c.grad()}; });
      break;
    case UnaryOp::RDivScalar:  // d(s/x) = -s/x^2 = -y/x
      record_pointwise("RDivScalarBackward", {x}, {y}, {x, y},
                       [](BackwardContext& c) { return TensorList{-c.grad() * c.saved[1] / c.saved[0]}; });
      break;
    default:
      NABLA_ASSERT(false, "scalar_op: unexpected op");
  }
  return y;
}

}  // namespace

// ---- binary ----------------------------------------------------------------------------------
// Autocast: widest (mixed inputs promote in binary_forward), except pow: float32.

Tensor add(const Tensor& a, const Tensor& b, double alpha) {
  Tensor y = binary_forward(BinaryOp::Add, a, b, "add", alpha);
  if (autograd::needs_grad({a, b})) {
    Shape sa = a.sizes(), sb = b.sizes();
    record_pointwise("AddBackward", {a, b}, {y}, {}, [sa, sb, alpha](BackwardContext& c) {
      return TensorList{c.needs(0) ? sum_to(c.grad(), sa) : Tensor(),
                        c.needs(1) ? sum_to(alpha == 1.0 ? c.grad() : c.grad() * alpha, sb) : Tensor()};
    });
  }
  return y;
}

Tensor sub(const Tensor& a, const Tensor& b, double alpha) {
  return add(a, b, -alpha);
}

Tensor mul(const Tensor& a, const Tensor& b) {
  Tensor y = binary_forward(BinaryOp::Mul, a, b, "mul");
  if (autograd::needs_grad({a, b})) {
    Shape sa = a.sizes(), sb = b.sizes();
    // Each operand is saved for the other's gradient only (as PyTorch does): rotary embedding's
    // `q * cos` keeps cos, not q.
    record_pointwise("MulBackward", {a, b}, {y},
                     {b.requires_grad() ? a : Tensor(), a.requires_grad() ? b : Tensor()},
                     [sa, sb](BackwardContext& c) {
                       return TensorList{c.needs(0) ? sum_to(c.grad() * c.saved[1], sa) : Tensor(),
                                         c.needs(1) ? sum_to(c.grad() * c.saved[0], sb) : Tensor()};
                     });
  }
  return y;
}

Tensor div(const Tensor& a, const Tensor& b) {
  Tensor y = binary_forward(BinaryOp::Div, a, b, "div");
  if (autograd::needs_grad({a, b})) {
    Shape sa = a.sizes(), sb = b.sizes();
    record_pointwise("DivBackward", {a, b}, {y}, {b.requires_grad() ? a : Tensor(), b},
                     [sa, sb](BackwardContext& c) {
                       const Tensor &x = c.saved[0], &d = c.saved[1];
                       return TensorList{c.needs(0) ? sum_to(c.grad() / d, sa) : Tensor(),
                                         c.needs(1) ? sum_to(-c.grad() * x / (d * d), sb) : Tensor()};
                     });
  }
  return y;
}

Tensor pow(const Tensor& a_in, const Tensor& b_in) {
  // Autocast: float32.
  const auto [a, b] = ops::autocast(ops::AutocastCategory::Float32, {a_in, b_in});
  Tensor y = binary_forward(BinaryOp::Pow, a, b, "pow");
  if (autograd::needs_grad({a, b})) {
    Shape sa = a.sizes(), sb = b.sizes();
    record_pointwise("PowBackward", {a, b}, {y}, {a, b, y}, [sa, sb](BackwardContext& c) {
      const Tensor &x = c.saved[0], &e = c.saved[1], &out = c.saved[2];
      return TensorList{c.needs(0) ? sum_to(c.grad() * e * pow(x, e - 1.0), sa) : Tensor(),
                        c.needs(1) ? sum_to(c.grad() * out * log(x), sb) : Tensor()};
    });
  }
  return y;
}

Tensor pow(const Tensor& a_in, double exponent) {
  // Autocast: float32.
  const Tensor a = ops::autocast_one(ops::AutocastCategory::Float32, a_in);
  Tensor y = unary_forward(UnaryOp::PowScalar, a, "pow", {.a = exponent});
  if (autograd::needs_grad({a})) {
    record_pointwise("PowScalarBackward", {a}, {y}, {a}, [exponent](BackwardContext& c) {
      if (exponent == 0.0) return TensorList{zeros_like(c.grad())};
      return TensorList{c.grad() * exponent * pow(c.saved[0], exponent - 1.0)};
    });
  }
  return y;
}

namespace {
// Gradient share of `a` in maximum/minimum: 1 where a wins, 1/2 on ties (as PyTorch).
Tensor winner_mask(const Tensor& a, const Tensor& b, bool is_max, DType dtype) {
  Tensor wins = (is_max ? gt(a, b) : lt(a, b)).to(dtype);
  return wins + eq(a, b).to(dtype) * 0.5;
}

Tensor extremum(const Tensor& a, const Tensor& b, bool is_max) {
  const char* name = is_max ? "maximum" : "minimum";
  Tensor y = binary_forward(is_max ? BinaryOp::Maximum : BinaryOp::Minimum, a, b, name);
  if (autograd::needs_grad({a, b})) {
    Shape sa = a.sizes(), sb = b.sizes();
    record_pointwise(is_max ? "MaximumBackward" : "MinimumBackward", {a, b}, {y}, {a, b},
                     [sa, sb, is_max](BackwardContext& c) {
                       Tensor share = winner_mask(c.saved[0], c.saved[1], is_max, c.grad().dtype());
                       return TensorList{c.needs(0) ? sum_to(c.grad() * share, sa) : Tensor(),
                                         c.needs(1) ? sum_to(c.grad() * (1.0 - share), sb) : Tensor()};
                     });
  }
  return y;
}
}  // namespace

Tensor maximum(const Tensor& a, const Tensor& b) {
  return extremum(a, b, true);
}
Tensor minimum(const Tensor& a, const Tensor& b) {
  return extremum(a, b, false);
}

Tensor add(const Tensor& a, double b) {
  return scalar_op(UnaryOp::AddScalar, a, b, "add");
}
Tensor mul(const Tensor& a, double b) {
  return scalar_op(UnaryOp::MulScalar, a, b, "mul");
}

// ---- unary -----------------------------------------------------------------------------------

Tensor neg(const Tensor& x) {
  return unary_op(UnaryOp::Neg, x, "neg", "NegBackward", Save::nothing,
                  [](BackwardContext& c) { return TensorList{-c.grad()}; });
}

Tensor abs(const Tensor& x) {
  return unary_op(UnaryOp::Abs, x, "abs", "AbsBackward", Save::input,
                  [](BackwardContext& c) { return TensorList{c.grad() * sign(c.saved[0])}; });
}

Tensor sign(const Tensor& x) {
  return unary_op(UnaryOp::Sign, x, "sign", "SignBackward", Save::nothing,
                  [](BackwardContext& c) { return TensorList{zeros_like(c.grad())}; });
}

Tensor exp(const Tensor& x_in) {
  // Autocast: float32.
  const Tensor x = ops::autocast_one(ops::AutocastCategory::Float32, x_in);
  return unary_op(UnaryOp::Exp, x, "exp", "ExpBackward", Save::output,
                  [](BackwardContext& c) { return TensorList{c.grad() * c.saved[0]}; });
}

Tensor log(const Tensor& x_in) {
  // Autocast: float32.
  const Tensor x = ops::autocast_one(ops::AutocastCategory::Float32, x_in);
  return unary_op(UnaryOp::Log, x, "log", "LogBackward", Save::input,
                  [](BackwardContext& c) { return TensorList{c.grad() / c.saved[0]}; });
}

Tensor log1p(const Tensor& x_in) {  // d log(1 + x) = 1 / (1 + x)
  // Autocast: float32, as log.
  const Tensor x = ops::autocast_one(ops::AutocastCategory::Float32, x_in);
  return unary_op(UnaryOp::Log1p, x, "log1p", "Log1pBackward", Save::input,
                  [](BackwardContext& c) { return TensorList{c.grad() / (c.saved[0] + 1.0)}; });
}

Tensor expm1(const Tensor& x_in) {  // d (exp(x) - 1) = exp(x) = y + 1
  // Autocast: float32, as exp.
  const Tensor x = ops::autocast_one(ops::AutocastCategory::Float32, x_in);
  return unary_op(UnaryOp::Expm1, x, "expm1", "Expm1Backward", Save::output,
                  [](BackwardContext& c) { return TensorList{c.grad() * (c.saved[0] + 1.0)}; });
}

Tensor sin(const Tensor& x_in) {  // d sin(x) = cos(x)
  // Autocast: float32, as exp (rotary tables need the precision).
  const Tensor x = ops::autocast_one(ops::AutocastCategory::Float32, x_in);
  return unary_op(UnaryOp::Sin, x, "sin", "SinBackward", Save::input,
                  [](BackwardContext& c) { return TensorList{c.grad() * cos(c.saved[0])}; });
}

Tensor cos(const Tensor& x_in) {  // d cos(x) = -sin(x)
  const Tensor x = ops::autocast_one(ops::AutocastCategory::Float32, x_in);
  return unary_op(UnaryOp::Cos, x, "cos", "CosBackward", Save::input,
                  [](BackwardContext& c) { return TensorList{c.grad() * sin(c.saved[0]) * -1.0}; });
}

Tensor erf(const Tensor& x) {  // d erf(x) = 2 / sqrt(pi) * exp(-x^2)
  return unary_op(UnaryOp::Erf, x, "erf", "ErfBackward", Save::input, [](BackwardContext& c) {
    const Tensor& v = c.saved[0];
    return TensorList{c.grad() * exp(v * v * -1.0) * 1.12837916709551257390};
  });
}

Tensor sqrt(const Tensor& x) {
  return unary_op(UnaryOp::Sqrt, x, "sqrt", "SqrtBackward", Save::output,
                  [](BackwardContext& c) { return TensorList{c.grad() / (c.saved[0] * 2.0)}; });
}

Tensor rsqrt(const Tensor& x) {  // d(x^-1/2) = -1/2 x^-3/2 = -1/2 y^3
  return unary_op(UnaryOp::Rsqrt, x, "rsqrt", "RsqrtBackward", Save::output, [](BackwardContext& c) {
    const Tensor& y = c.saved[0];
    return TensorList{c.grad() * y * y * y * -0.5};
  });
}

Tensor reciprocal(const Tensor& x) {
  return unary_op(UnaryOp::Reciprocal, x, "reciprocal", "ReciprocalBackward", Save::output,
                  [](BackwardContext& c) {
                    const Tensor& y = c.saved[0];
                    return TensorList{-c.grad() * y * y};
                  });
}

Tensor relu(const Tensor& x) {
  return unary_op(UnaryOp::Relu, x, "relu", "ReluBackward", Save::output, [](BackwardContext& c) {
    return TensorList{fused_backward(BinaryOp::ThresholdBackward, c.grad(), c.saved[0], "relu_backward")};
  });
}

Tensor sigmoid(const Tensor& x) {
  return unary_op(UnaryOp::Sigmoid, x, "sigmoid", "SigmoidBackward", Save::output, [](BackwardContext& c) {
    if (GradMode::is_enabled())
      return TensorList{c.grad() * c.saved[0] * (1.0 - c.saved[0])};  // create_graph
    return TensorList{fused_backward(BinaryOp::SigmoidBackward, c.grad(), c.saved[0], "sigmoid_backward")};
  });
}

Tensor tanh(const Tensor& x) {
  return unary_op(UnaryOp::Tanh, x, "tanh", "TanhBackward", Save::output, [](BackwardContext& c) {
    if (GradMode::is_enabled())
      return TensorList{c.grad() * (1.0 - c.saved[0] * c.saved[0])};  // create_graph
    return TensorList{fused_backward(BinaryOp::TanhBackward, c.grad(), c.saved[0], "tanh_backward")};
  });
}

Tensor gelu(const Tensor& x, GeluOptions options) {
  bool approx = options.tanh_approximation;
  return unary_op(
      approx ? UnaryOp::GeluTanh : UnaryOp::Gelu, x, "gelu", "GeluBackward", Save::input,
      [approx](BackwardContext& c) {
        return TensorList{fused_backward(approx ? BinaryOp::GeluTanhBackward : BinaryOp::GeluBackward,
                                         c.grad(), c.saved[0], "gelu_backward")};
      });
}

Tensor gelu_backward(const Tensor& grad, const Tensor& x, GeluOptions options) {
  return fused_backward(options.tanh_approximation ? BinaryOp::GeluTanhBackward : BinaryOp::GeluBackward,
                        grad, x, "gelu_backward");
}

Tensor silu(const Tensor& x) {
  return unary_op(UnaryOp::Silu, x, "silu", "SiluBackward", Save::input, [](BackwardContext& c) {
    return TensorList{fused_backward(BinaryOp::SiluBackward, c.grad(), c.saved[0], "silu_backward")};
  });
}

Tensor leaky_relu(const Tensor& x, double negative_slope) {
  return unary_op(UnaryOp::LeakyRelu, x, "leaky_relu", "LeakyReluBackward", Save::input,
                  [negative_slope](BackwardContext& c) {
                    return TensorList{fused_backward(BinaryOp::LeakyReluBackward, c.grad(), c.saved[0],
                                                     "leaky_relu_backward", negative_slope)};
                  },
                  {.a = negative_slope});
}

Tensor elu(const Tensor& x, double alpha) {
  return unary_op(
      UnaryOp::Elu, x, "elu", "EluBackward", Save::input,
      [alpha](BackwardContext& c) {
        return TensorList{fused_backward(BinaryOp::EluBackward, c.grad(), c.saved[0], "elu_backward", alpha)};
      },
      {.a = alpha});
}

Tensor hardswish(const Tensor& x) {
  return unary_op(
      UnaryOp::Hardswish, x, "hardswish", "HardswishBackward", Save::input, [](BackwardContext& c) {
        return TensorList{
            fused_backward(BinaryOp::HardswishBackward, c.grad(), c.saved[0], "hardswish_backward")};
      });
}

Tensor hardsigmoid(const Tensor& x) {
  return unary_op(
      UnaryOp::Hardsigmoid, x, "hardsigmoid", "HardsigmoidBackward", Save::input, [](BackwardContext& c) {
        return TensorList{
            fused_backward(BinaryOp::HardsigmoidBackward, c.grad(), c.saved[0], "hardsigmoid_backward")};
      });
}

Tensor softplus(const Tensor& x, double beta, double threshold) {
  NABLA_CHECK(beta != 0, "softplus: beta must be non-zero, got {}", beta);
  return unary_op(UnaryOp::Softplus, x, "softplus", "SoftplusBackward", Save::input,
                  [beta, threshold](BackwardContext& c) {
                    // d/dx = sigmoid(beta x), and 1 where the op is x itself: composed, so it has a
                    // derivative.
                    const Tensor& in = c.saved[0];
                    const Tensor bx = in * beta;
                    return TensorList{where(gt(bx, threshold), c.grad(), c.grad() * sigmoid(bx))};
                  },
                  {.a = beta, .b = threshold});
}

Tensor mish(const Tensor& x) {
  return unary_op(UnaryOp::Mish, x, "mish", "MishBackward", Save::input, [](BackwardContext& c) {
    return TensorList{fused_backward(BinaryOp::MishBackward, c.grad(), c.saved[0], "mish_backward")};
  });
}

Tensor clamp(const Tensor& x, std::optional<double> min, std::optional<double> max) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  double lo = min.value_or(-kInf), hi = max.value_or(kInf);
  NABLA_CHECK(min || max, "clamp: give at least one of min and max");
  NABLA_CHECK(!(lo > hi), "clamp: min {} is greater than max {}", lo, hi);
  return unary_op(UnaryOp::Clamp, x, "clamp", "ClampBackward", Save::input,
                  [lo, hi](BackwardContext& c) {
                    const Tensor& in = c.saved[0];
                    Tensor inside = mul(ge(in, lo), le(in, hi)).to(c.grad().dtype());
                    return TensorList{c.grad() * inside};
                  },
                  {.a = lo, .b = hi});
}

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  ops::check_defined("where", cond, "condition");
  ops::check_defined("where", a, "self");
  ops::check_defined("where", b, "other");
  NABLA_CHECK(cond.dtype() == kBool, "where: condition must be a bool tensor, got {}", describe(cond));
  ops::check_same_device("where", {cond, a, b});
  DType common = promote_types(a.dtype(), b.dtype());
  Tensor ac = cast_to(a, common), bc = cast_to(b, common);
  Shape sizes = broadcast_shapes(broadcast_shapes(cond.sizes(), a.sizes(), "where"), b.sizes(), "where");
  Tensor out = empty_output(sizes, common, a.device(), {&ac, &bc});
  nabla::dispatch_pointwise(
      "where", a, [&] { ops::cpu::where(cond, ac, bc, out); },
      [&] {
        if (ops::fusion::record_where(cond, ac, bc, out)) return;
        flush_deferred();
        ops::cuda::where(cond, ac, bc, out);
      });
  if (autograd::needs_grad({a, b})) {
    Shape sa = a.sizes(), sb = b.sizes();
    record_pointwise("WhereBackward", {a, b}, {out}, {cond}, [sa, sb](BackwardContext& c) {
      Tensor zero = zeros_like(c.grad());
      return TensorList{c.needs(0) ? sum_to(where(c.saved[0], c.grad(), zero), sa) : Tensor(),
                        c.needs(1) ? sum_to(where(c.saved[0], zero, c.grad()), sb) : Tensor()};
    });
  }
  return out;
}

// ---- comparisons -----------------------------------------------------------------------------

Tensor eq(const Tensor& a, const Tensor& b) {
  return binary_forward(BinaryOp::Eq, a, b, "eq");
}
Tensor ne(const Tensor& a, const Tensor& b) {
  return binary_forward(BinaryOp::Ne, a, b, "ne");
}
Tensor lt(const Tensor& a, const Tensor& b) {
  return binary_forward(BinaryOp::Lt, a, b, "lt");
}
Tensor le(const Tensor& a, const Tensor& b) {
  return binary_forward(BinaryOp::Le, a, b, "le");
}
Tensor gt(const Tensor& a, const Tensor& b) {
  return binary_forward(BinaryOp::Gt, a, b, "gt");
}
Tensor ge(const Tensor& a, const Tensor& b) {
  return binary_forward(BinaryOp::Ge, a, b, "ge");
}
Tensor eq(const Tensor& a, double b) {
  return unary_forward(UnaryOp::EqScalar, a, "eq", {.a = b});
}
Tensor ne(const Tensor& a, double b) {
  return unary_forward(UnaryOp::NeScalar, a, "ne", {.a = b});
}
Tensor lt(const Tensor& a, double b) {
  return unary_forward(UnaryOp::LtScalar, a, "lt", {.a = b});
}
Tensor le(const Tensor& a, double b) {
  return unary_forward(UnaryOp::LeScalar, a, "le", {.a = b});
}
Tensor gt(const Tensor& a, double b) {
  return unary_forward(UnaryOp::GtScalar, a, "gt", {.a = b});
}
Tensor ge(const Tensor& a, double b) {
  return unary_forward(UnaryOp::GeScalar, a, "ge", {.a = b});
}

Tensor threshold_backward(const Tensor& grad, const Tensor& output) {
  return fused_backward(BinaryOp::ThresholdBackward, grad, output, "threshold_backward");
}

// ---- operators -------------------------------------------------------------------------------

Tensor operator+(const Tensor& a, const Tensor& b) {
  return add(a, b);
}
Tensor operator-(const Tensor& a, const Tensor& b) {
  return sub(a, b);
}
Tensor operator*(const Tensor& a, const Tensor& b) {
  return mul(a, b);
}
Tensor operator/(const Tensor& a, const Tensor& b) {
  return div(a, b);
}
Tensor operator-(const Tensor& x) {
  return neg(x);
}
Tensor operator+(const Tensor& a, double b) {
  return scalar_op(UnaryOp::AddScalar, a, b, "add");
}
Tensor operator-(const Tensor& a, double b) {
  return scalar_op(UnaryOp::AddScalar, a, -b, "sub");
}
Tensor operator*(const Tensor& a, double b) {
  return scalar_op(UnaryOp::MulScalar, a, b, "mul");
}
Tensor operator/(const Tensor& a, double b) {
  // Integer tensors divide truly, as with tensor division.
  Tensor x = a.defined() && !a.is_floating_point() ? a.to(kFloat32) : a;
  return scalar_op(UnaryOp::MulScalar, x, 1.0 / b, "div");
}
Tensor operator+(double a, const Tensor& b) {
  return scalar_op(UnaryOp::AddScalar, b, a, "add");
}
Tensor operator-(double a, const Tensor& b) {
  return scalar_op(UnaryOp::RSubScalar, b, a, "rsub");
}
Tensor operator*(double a, const Tensor& b) {
  return scalar_op(UnaryOp::MulScalar, b, a, "mul");
}
Tensor operator/(double a, const Tensor& b) {
  Tensor x = b.defined() && !b.is_floating_point() ? b.to(kFloat32) : b;
  return scalar_op(UnaryOp::RDivScalar, x, a, "rdiv");
}
Tensor& operator+=(Tensor& a, const Tensor& b) {
  return add_(a, b);
}
Tensor& operator-=(Tensor& a, const Tensor& b) {
  return sub_(a, b);
}
Tensor& operator*=(Tensor& a, const Tensor& b) {
  return mul_(a, b);
}
Tensor& operator/=(Tensor& a, const Tensor& b) {
  return div_(a, b);
}
Tensor& operator+=(Tensor& a, double b) {
  return add_(a, b);
}
Tensor& operator-=(Tensor& a, double b) {
  return add_(a, -b);
}
Tensor& operator*=(Tensor& a, double b) {
  return mul_(a, b);
}
Tensor& operator/=(Tensor& a, double b) {
  return mul_(a, 1.0 / b);
}

}  // namespace nabla
