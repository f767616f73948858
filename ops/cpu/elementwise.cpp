// CPU elementwise kernels: the formulas of detail/elementwise_formulas.h (Note [One formula per
// op]) in CPU loops. The op kind and the dtype are chosen once, outside the loop, so each
// (op, dtype) pair compiles to its own tight loop.
#include "nabla/ops/cpu/kernels.h"
#include "nabla/ops/cpu/loops.h"
#include "nabla/ops/detail/elementwise_formulas.h"

namespace nabla::ops::cpu {

namespace {

template <typename T>
void unary_typed(UnaryOp op, const Tensor& in, const Tensor& out, UnaryParams p) {
  using C = compute_t<T>;
  with_unary_op(op, [&]<UnaryOp kOp>() {
    auto plan = make_plan<2>({&out, &in});
    if constexpr (is_comparison(kOp)) {
      const double a = p.a;
      elementwise<bool, T, 2>(plan,
                              [a](C x) { return formula::compare_scalar<kOp>(static_cast<double>(x), a); });
    } else if constexpr (is_float_only(kOp) && !formula::kIsFloat<C>) {
      NABLA_ASSERT(false, "unary op {} reached the CPU kernel with integer dtype {}", name(kOp),
                   dtype_name(in.dtype()));
    } else {
      const auto s = formula::UnaryScalars<C>::from(p);
      elementwise<T, T, 2>(plan, [s](C x) { return formula::unary<kOp>(x, s); });
    }
  });
}

template <typename T>
void binary_typed(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out, double alpha_d) {
  using C = compute_t<T>;
  with_binary_op(op, [&]<BinaryOp kOp>() {
    auto plan = make_plan<3>({&out, &a, &b});
    if constexpr (std::is_same_v<T, bool>) {
      if constexpr (is_logical_op(kOp)) {
        elementwise<bool, bool, 3>(plan, [](bool x, bool y) { return formula::logical<kOp>(x, y); });
      } else {
        NABLA_ASSERT(false, "binary op {} reached the CPU kernel with bool inputs", name(kOp));
      }
    } else if constexpr (is_comparison(kOp)) {
      elementwise<bool, T, 3>(plan, [](C x, C y) { return formula::compare<kOp>(x, y); });
    } else if constexpr (!formula::kIsFloat<C> && !is_integer_op(kOp)) {
      NABLA_ASSERT(false, "binary op {} reached the CPU kernel with dtype {}", name(kOp),
                   dtype_name(a.dtype()));
    } else {
      const C alpha = static_cast<C>(alpha_d);
      elementwise<T, T, 3>(plan, [alpha](C x, C y) { return formula::binary<kOp>(x, y, alpha); });
    }
  });
}

}  // namespace

void unary(UnaryOp op, const Tensor& in, const Tensor& out, UnaryParams params) {
  dispatch<TypeSet::FloatingAndIntegral>(in.dtype(), "unary op",
                                         [&]<typename T>() { unary_typed<T>(op, in, out, params); });
}

void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out, double alpha) {
  NABLA_CHECK(a.dtype() != kBool || is_logical_op(op),
              "binary op on bool tensors: only +, *, maximum, minimum and comparisons are defined");
  dispatch(a.dtype(), "binary op", [&]<typename T>() { binary_typed<T>(op, a, b, out, alpha); });
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
