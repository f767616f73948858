// Public header. Elementwise ops with broadcasting and type promotion.
//
// Mixed dtypes promote as in PyTorch (int + float -> float, float16 + float32 -> float32);
// a C++ scalar never widens a floating tensor (x_half * 2.0 stays float16). Outputs keep the
// channels_last layout of a channels_last input. The in-place forms (add_, relu_, ...) write
// into their first argument and refuse a result dtype or shape that would not fit it.
#pragma once

#include <optional>

#include "nabla/core/tensor.h"

namespace nabla {

Tensor add(const Tensor& a, const Tensor& b, double alpha = 1.0);  // a + alpha * b
Tensor sub(const Tensor& a, const Tensor& b, double alpha = 1.0);  // a - alpha * b
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor pow(const Tensor& a, const Tensor& b);
Tensor pow(const Tensor& a, double exponent);
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);
Tensor add(const Tensor& a, double b);
Tensor mul(const Tensor& a, double b);

Tensor neg(const Tensor& x);
Tensor abs(const Tensor& x);
Tensor sign(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor expm1(const Tensor& x);  // exp(x) - 1, exact for small x
Tensor log(const Tensor& x);
Tensor log1p(const Tensor& x);  // log(1 + x), exact for small x
Tensor sqrt(const Tensor& x);
Tensor rsqrt(const Tensor& x);
Tensor reciprocal(const Tensor& x);
Tensor relu(const Tensor& x);
Tensor sigmoid(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor sin(const Tensor& x);
Tensor cos(const Tensor& x);
Tensor erf(const Tensor& x);  // the error function, 2/sqrt(pi) * integral of exp(-t^2) from 0 to x
struct GeluOptions {
  bool tanh_approximation = false;  // the "tanh" approximation of PyTorch's approximate='tanh'
};
Tensor gelu(const Tensor& x, GeluOptions options = {});
// grad * gelu'(x), gelu's backward as one op (as PyTorch's aten::gelu_backward); not itself
// differentiable.
Tensor gelu_backward(const Tensor& grad, const Tensor& x, GeluOptions options = {});
Tensor silu(const Tensor& x);
// The activations of mobile and vision models, with PyTorch's definitions and defaults:
// leaky_relu: x > 0 ? x : negative_slope * x; elu: x > 0 ? x : alpha * (exp(x) - 1);
// hardswish: x * relu6(x + 3) / 6; hardsigmoid: relu6(x + 3) / 6; softplus: log(1 + exp(beta x)) /
// beta, x itself where beta x > threshold; mish: x * tanh(softplus(x)). The backward of each is
// one fused kernel (softplus's is composed, so it is also differentiable twice).
Tensor leaky_relu(const Tensor& x, double negative_slope = 0.01);
Tensor elu(const Tensor& x, double alpha = 1.0);
Tensor hardswish(const Tensor& x);
Tensor hardsigmoid(const Tensor& x);
Tensor softplus(const Tensor& x, double beta = 1.0, double threshold = 20.0);
Tensor mish(const Tensor& x);
// Bounds are optional; NaN stays NaN.
Tensor clamp(const Tensor& x, std::optional<double> min, std::optional<double> max);
// cond ? a : b, broadcasting all three; cond must be bool.
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);

// Comparisons give bool tensors and no gradient.
Tensor eq(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Tensor& b);
Tensor eq(const Tensor& a, double b);
Tensor ne(const Tensor& a, double b);
Tensor lt(const Tensor& a, double b);
Tensor le(const Tensor& a, double b);
Tensor gt(const Tensor& a, double b);
Tensor ge(const Tensor& a, double b);

// In place.
Tensor& add_(Tensor& self, const Tensor& other, double alpha = 1.0);
Tensor& sub_(Tensor& self, const Tensor& other, double alpha = 1.0);
Tensor& mul_(Tensor& self, const Tensor& other);
Tensor& div_(Tensor& self, const Tensor& other);
Tensor& add_(Tensor& self, double value);
Tensor& mul_(Tensor& self, double value);
Tensor& relu_(Tensor& self);
Tensor& clamp_(Tensor& self, std::optional<double> min, std::optional<double> max);
Tensor& neg_(Tensor& self);
Tensor& exp_(Tensor& self);
Tensor& sigmoid_(Tensor& self);
Tensor& tanh_(Tensor& self);

// Fused gradients, used by backward passes (no history of their own).
Tensor threshold_backward(const Tensor& grad, const Tensor& output);  // grad * (output > 0)

Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& x);
Tensor operator+(const Tensor& a, double b);
Tensor operator-(const Tensor& a, double b);
Tensor operator*(const Tensor& a, double b);
Tensor operator/(const Tensor& a, double b);
Tensor operator+(double a, const Tensor& b);
Tensor operator-(double a, const Tensor& b);
Tensor operator*(double a, const Tensor& b);
Tensor operator/(double a, const Tensor& b);
Tensor& operator+=(Tensor& a, const Tensor& b);
Tensor& operator-=(Tensor& a, const Tensor& b);
Tensor& operator*=(Tensor& a, const Tensor& b);
Tensor& operator/=(Tensor& a, const Tensor& b);
Tensor& operator+=(Tensor& a, double b);
Tensor& operator-=(Tensor& a, double b);
Tensor& operator*=(Tensor& a, double b);
Tensor& operator/=(Tensor& a, double b);

}  // namespace nabla
