// Public header. Parameter initializers, in place and outside autograd, as torch.nn.init.
//
//   nn::init::kaiming_normal_(conv.weight, {.mode = nn::init::FanMode::fan_out});  // relu gain
//   nn::init::trunc_normal_(w, {.std = 0.02}, &generator);
//
// Random ones draw from `generator`, or from the tensor's device's default generator when null.
// fan_in = size(1) * receptive field, fan_out = size(0) * receptive field (receptive field = the
// product of sizes from dim 2 on); they need a tensor of at least 2 dims.
#pragma once

#include <string>

#include "nabla/core/generator.h"
#include "nabla/core/tensor.h"

namespace nabla::nn::init {

enum class FanMode { fan_in, fan_out };
enum class Nonlinearity { linear, conv, sigmoid, tanh, relu, leaky_relu, selu };

// The recommended gain for a nonlinearity; `param` is leaky_relu's negative slope (0.01 default
// when negative).
double calculate_gain(Nonlinearity nonlinearity, double param = -1.0);
// {fan_in, fan_out}.
std::pair<int64_t, int64_t> calculate_fan_in_and_fan_out(const Tensor& t);

struct KaimingOptions {
  double a = 0;  // leaky_relu's negative slope
  FanMode mode = FanMode::fan_in;
  Nonlinearity nonlinearity = Nonlinearity::relu;
};
struct XavierOptions {
  double gain = 1.0;
};
struct TruncNormalOptions {
  double mean = 0.0;
  double std = 1.0;
  double a = -2.0;  // the lower bound, in absolute units (as PyTorch)
  double b = 2.0;   // the upper bound
};

// U(-bound, bound) with bound = gain * sqrt(3 / fan).
Tensor& kaiming_uniform_(Tensor& t, KaimingOptions options = {}, Generator* generator = nullptr);
// N(0, std^2) with std = gain / sqrt(fan).
Tensor& kaiming_normal_(Tensor& t, KaimingOptions options = {}, Generator* generator = nullptr);
// U(-a, a) with a = gain * sqrt(6 / (fan_in + fan_out)).
Tensor& xavier_uniform_(Tensor& t, XavierOptions options = {}, Generator* generator = nullptr);
// N(0, std^2) with std = gain * sqrt(2 / (fan_in + fan_out)).
Tensor& xavier_normal_(Tensor& t, XavierOptions options = {}, Generator* generator = nullptr);
// N(mean, std^2) restricted to [a, b] (values outside are redrawn).
Tensor& trunc_normal_(Tensor& t, TruncNormalOptions options = {}, Generator* generator = nullptr);
Tensor& uniform_(Tensor& t, double low = 0.0, double high = 1.0, Generator* generator = nullptr);
Tensor& normal_(Tensor& t, double mean = 0.0, double std = 1.0, Generator* generator = nullptr);
Tensor& constant_(Tensor& t, double value);
Tensor& zeros_(Tensor& t);
Tensor& ones_(Tensor& t);

}  // namespace nabla::nn::init
