// Parameter initializers (torch.nn.init's formulas).
#include "nabla/nn/init.h"

#include <cmath>
#include <vector>

#include "nabla/core/autograd/grad_mode.h"
#include "nabla/core/error.h"
#include "nabla/ops/elementwise.h"
#include "nabla/ops/factory.h"

namespace nabla::nn::init {

double calculate_gain(Nonlinearity nonlinearity, double param) {
  switch (nonlinearity) {
    case Nonlinearity::linear:
    case Nonlinearity::conv:
    case Nonlinearity::sigmoid:
      return 1.0;
    case Nonlinearity::tanh:
      return 5.0 / 3.0;
    case Nonlinearity::relu:
      return std::sqrt(2.0);
    case Nonlinearity::leaky_relu: {
      double slope = param < 0 ? 0.01 : param;
      return std::sqrt(2.0 / (1 + slope * slope));
    }
    case Nonlinearity::selu:
      return 3.0 / 4.0;
  }
  return 1.0;
}

std::pair<int64_t, int64_t> calculate_fan_in_and_fan_out(const Tensor& t) {
  NABLA_CHECK(t.dim() >= 2, "fan in and fan out need a tensor of at least 2 dims, got {}", describe(t));
  int64_t receptive = 1;
  for (int64_t d = 2; d < t.dim(); ++d) receptive *= t.size(d);
  return {t.size(1) * receptive, t.size(0) * receptive};
}

namespace {

// Writes `values` (drawn in t's dtype on t's device) into t.
Tensor& assign(Tensor& t, const Tensor& values) {
  NoGradGuard no_grad;
  t.copy_(values);
  return t;
}

TensorOptions options_of(const Tensor& t) {
  return {.dtype = t.dtype(), .device = t.device()};
}

double kaiming_std(const Tensor& t, const KaimingOptions& options) {
  auto [fan_in, fan_out] = calculate_fan_in_and_fan_out(t);
  int64_t fan = options.mode == FanMode::fan_in ? fan_in : fan_out;
  NABLA_CHECK(fan > 0, "kaiming init of a tensor with zero elements: {}", describe(t));
  double param = options.nonlinearity == Nonlinearity::leaky_relu ? options.a : -1.0;
  return calculate_gain(options.nonlinearity, param) / std::sqrt(static_cast<double>(fan));
}

double xavier_std(const Tensor& t, const XavierOptions& options) {
  auto [fan_in, fan_out] = calculate_fan_in_and_fan_out(t);
  return options.gain * std::sqrt(2.0 / static_cast<double>(fan_in + fan_out));
}

}  // namespace

Tensor& uniform_(Tensor& t, double low, double high, Generator* generator) {
  NABLA_CHECK(low <= high, "uniform_: low {} must not exceed high {}", low, high);
  NoGradGuard no_grad;
  return assign(t, rand(t.sizes(), options_of(t), generator) * (high - low) + low);
}

Tensor& normal_(Tensor& t, double mean, double std, Generator* generator) {
  NABLA_CHECK(std >= 0, "normal_: std must be >= 0, got {}", std);
  NoGradGuard no_grad;
  return assign(t, randn(t.sizes(), options_of(t), generator) * std + mean);
}

Tensor& kaiming_uniform_(Tensor& t, KaimingOptions options, Generator* generator) {
  double bound = std::sqrt(3.0) * kaiming_std(t, options);
  return uniform_(t, -bound, bound, generator);
}

Tensor& kaiming_normal_(Tensor& t, KaimingOptions options, Generator* generator) {
  return normal_(t, 0.0, kaiming_std(t, options), generator);
}

Tensor& xavier_uniform_(Tensor& t, XavierOptions options, Generator* generator) {
  double bound = std::sqrt(3.0) * xavier_std(t, options);
  return uniform_(t, -bound, bound, generator);
}

Tensor& xavier_normal_(Tensor& t, XavierOptions options, Generator* generator) {
  return normal_(t, 0.0, xavier_std(t, options), generator);
}

Tensor& trunc_normal_(Tensor& t, TruncNormalOptions options, Generator* generator) {
  NABLA_CHECK(options.a < options.b && options.std > 0,
              "trunc_normal_: need a < b and std > 0, got a {}, b {}, std {}", options.a, options.b,
              options.std);
  // Rejection on the CPU in float64: simple, exact, and cheap for the sizes parameters have.
  Generator& gen = generator != nullptr ? *generator : default_generator(Device::cpu());
  std::vector<double> values;
  values.reserve(static_cast<size_t>(t.numel()));
  while (static_cast<int64_t>(values.size()) < t.numel()) {
    int64_t want = t.numel() - static_cast<int64_t>(values.size());
    auto draws = randn({want + 16}, {.dtype = kFloat64}, &gen).to_vector<double>();
    for (double z : draws) {
      double v = options.mean + options.std * z;
      if (v >= options.a && v <= options.b && static_cast<int64_t>(values.size()) < t.numel())
        values.push_back(v);
    }
  }
  NoGradGuard no_grad;
  return assign(t, tensor<double>(values, t.sizes()).to(t.device(), t.dtype()));
}

Tensor& constant_(Tensor& t, double value) {
  NoGradGuard no_grad;
  t.fill_(value);
  return t;
}

Tensor& zeros_(Tensor& t) {
  return constant_(t, 0.0);
}
Tensor& ones_(Tensor& t) {
  return constant_(t, 1.0);
}

}  // namespace nabla::nn::init
