// Elementwise ops: forward against std:: math on the same values, broadcasting and promotion,
// layouts, and float64 gradchecks for every differentiable op.
#include <algorithm>
#include <cmath>
#include <functional>

#include "test_util.h"

namespace nabla {
namespace {

using testing::all_close;
using testing::random_input;
using testing::test_seed;

// Applies a scalar reference elementwise to a tensor's values (computed in double).
Tensor reference_unary(const Tensor& x, const std::function<double(double)>& f) {
  std::vector<double> v = x.to(kFloat64).contiguous().to_vector<double>();
  for (double& e : v) e = f(e);
  return tensor<double>(v, x.sizes());
}

struct UnaryCase {
  const char* name;
  std::function<Tensor(const Tensor&)> op;
  std::function<double(double)> ref;
  bool positive_only;  // domain needs x > 0
};

std::vector<UnaryCase> unary_cases() {
  auto sig = [](double x) { return 1 / (1 + std::exp(-x)); };
  return {
      {"neg", [](const Tensor& x) { return neg(x); }, [](double x) { return -x; }, false},
      {"abs", [](const Tensor& x) { return abs(x); }, [](double x) { return std::abs(x); }, false},
      {"exp", [](const Tensor& x) { return exp(x); }, [](double x) { return std::exp(x); }, false},
      {"log", [](const Tensor& x) { return log(x); }, [](double x) { return std::log(x); }, true},
      // References computed another way than the kernels' std::expm1, std::log1p and std::erf.
      {"expm1", [](const Tensor& x) { return expm1(x); }, [](double x) { return std::exp(x) - 1; }, false},
      {"log1p", [](const Tensor& x) { return log1p(x); }, [](double x) { return std::log(1 + x); }, true},
      {"erf", [](const Tensor& x) { return erf(x); }, [](double x) { return 1 - std::erfc(x); }, false},
      // sin and cos through each other's identities, not the kernels' std::sin and std::cos.
      {"sin", [](const Tensor& x) { return sin(x); }, [](double x) { return std::cos(x - M_PI / 2); }, false},
      {"cos", [](const Tensor& x) { return cos(x); }, [](double x) { return std::sin(x + M_PI / 2); }, false},
      {"sqrt", [](const Tensor& x) { return sqrt(x); }, [](double x) { return std::sqrt(x); }, true},
      {"rsqrt", [](const Tensor& x) { return rsqrt(x); }, [](double x) { return 1 / std::sqrt(x); }, true},
      {"reciprocal", [](const Tensor& x) { return reciprocal(x); }, [](double x) { return 1 / x; }, false},
      {"relu", [](const Tensor& x) { return relu(x); }, [](double x) { return x > 0 ? x : 0; }, false},
      {"sigmoid", [](const Tensor& x) { return sigmoid(x); }, sig, false},
      {"tanh", [](const Tensor& x) { return tanh(x); }, [](double x) { return std::tanh(x); }, false},
      {"gelu", [](const Tensor& x) { return gelu(x); },
       [](double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }, false},
      {"gelu_tanh", [](const Tensor& x) { return gelu(x, {.tanh_approximation = true}); },
       [](double x) { return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x))); },
       false},
      {"silu", [](const Tensor& x) { return silu(x); }, [sig](double x) { return x * sig(x); }, false},
      {"leaky_relu", [](const Tensor& x) { return leaky_relu(x, 0.2); },
       [](double x) { return std::max(x, 0.0) + 0.2 * std::min(x, 0.0); }, false},
      {"elu", [](const Tensor& x) { return elu(x, 1.3); },
       [](double x) { return x > 0 ? x : 1.3 * (std::exp(x) - 1); }, false},
      // relu6(x + 3) through clamps written with std::clamp.
      {"hardswish", [](const Tensor& x) { return hardswish(x * 4.0); },
       [](double x) { return 4 * x * std::clamp(4 * x + 3, 0.0, 6.0) / 6; }, false},
      {"hardsigmoid", [](const Tensor& x) { return hardsigmoid(x * 4.0); },
       [](double x) { return std::clamp(4 * x + 3, 0.0, 6.0) / 6; }, false},
      // softplus as log(exp(0) + exp(beta x)) via the max trick; beta 2, threshold 3 crossed by |x| < 4.
      {"softplus", [](const Tensor& x) { return softplus(x * 2.0, 2.0, 3.0); },
       [](double x) {
         const double bx = 4 * x, m = std::max(bx, 0.0);
         return bx > 3 ? 2 * x : (m + std::log(std::exp(-m) + std::exp(bx - m))) / 2;
       },
       false},
      {"mish", [](const Tensor& x) { return mish(x * 4.0); },
       [](double x) { return 4 * x * std::tanh(std::log(1 + std::exp(4 * x))); }, false},
      {"clamp", [](const Tensor& x) { return clamp(x, -0.5, 0.7); },
       [](double x) { return std::min(std::max(x, -0.5), 0.7); }, false},
      {"pow3", [](const Tensor& x) { return pow(x, 3.0); }, [](double x) { return x * x * x; }, false},
      {"pow_half", [](const Tensor& x) { return pow(x, 0.5); }, [](double x) { return std::sqrt(x); }, true},
      {"add_scalar", [](const Tensor& x) { return x + 1.5; }, [](double x) { return x + 1.5; }, false},
      {"rsub_scalar", [](const Tensor& x) { return 2.0 - x; }, [](double x) { return 2.0 - x; }, false},
      {"mul_scalar", [](const Tensor& x) { return x * -3.0; }, [](double x) { return -3.0 * x; }, false},
      {"rdiv_scalar", [](const Tensor& x) { return 2.0 / x; }, [](double x) { return 2.0 / x; }, false},
  };
}

Tensor input_for(const UnaryCase& c, const Shape& sizes, uint64_t seed, DType dtype) {
  Tensor x = random_input(sizes, seed, kFloat64);
  if (c.positive_only) x = abs(x);
  return x.to(dtype);
}

TEST(Elementwise, UnaryOpsMatchStdMathInEveryFloatingDtype) {
  uint64_t seed = test_seed();
  for (const auto& c : unary_cases()) {
    for (DType dtype : {kFloat64, kFloat32, kFloat16, kBFloat16}) {
      Tensor x = input_for(c, {3, 17}, ++seed, dtype);
      Tensor y = c.op(x);
      EXPECT_EQ(y.dtype(), dtype) << c.name;
      // The reference sees the same (rounded) inputs; the output rounding sets the tolerance.
      double rtol = dtype == kFloat64 ? 1e-12 : dtype == kFloat32 ? 1e-6 : dtype == kFloat16 ? 2e-3 : 1e-2;
      EXPECT_TRUE(all_close(y, reference_unary(x, c.ref), rtol, rtol)) << c.name << " " << dtype_name(dtype);
    }
  }
}

// What expm1 and log1p are for: near 0, exp(x) - 1 and log(1 + x) lose every digit in float32,
// and these keep them (both are x - x^2/2 + ... there, and x^2/2 is below float32's resolution).
TEST(Elementwise, Expm1AndLog1pAreExactNearZero) {
  Tensor x = tensor<float>({1e-10f, -3e-9f, 2.5e-8f}, {3});
  EXPECT_TRUE(all_close(expm1(x), x, 1e-6, 0)) << expm1(x);
  EXPECT_TRUE(all_close(log1p(x), x, 1e-6, 0)) << log1p(x);
  EXPECT_TRUE(all_close(exp(x) - 1.0, zeros_like(x), 0, 0));         // the loss the two ops avoid
  EXPECT_EQ(expm1(tensor<int64_t>({0, 1}, {2})).dtype(), kFloat32);  // integers compute in float32
}

TEST(Elementwise, UnaryOpsKeepChannelsLastAndReadStridedInputs) {
  uint64_t seed = test_seed();
  for (const auto& c : unary_cases()) {
    Tensor x = input_for(c, {2, 3, 4, 5}, ++seed, kFloat32).contiguous(MemoryFormat::ChannelsLast);
    Tensor y = c.op(x);
    EXPECT_TRUE(y.is_contiguous(MemoryFormat::ChannelsLast)) << c.name;
    EXPECT_TRUE(all_close(y, reference_unary(x, c.ref), 1e-6, 1e-6)) << c.name;
    Tensor t = input_for(c, {6, 5}, ++seed, kFloat32).transpose(0, 1);  // non-contiguous
    EXPECT_TRUE(all_close(c.op(t), reference_unary(t, c.ref), 1e-6, 1e-6)) << c.name;
  }
}

TEST(Elementwise, UnaryOpsHaveCorrectGradients) {
  uint64_t seed = test_seed();
  for (const auto& c : unary_cases()) {
    if (std::string(c.name) == "relu" || std::string(c.name) == "clamp") continue;  // kinks: tested below
    Tensor x = input_for(c, {3, 4}, ++seed, kFloat64).requires_grad_();
    auto r = gradcheck([&](const TensorList& in) { return c.op(in[0]); }, {x});
    EXPECT_TRUE(r.ok) << c.name << ": " << r.message;
    Tensor t = input_for(c, {4, 3}, ++seed, kFloat64).transpose(0, 1).detach().requires_grad_();
    r = gradcheck([&](const TensorList& in) { return c.op(in[0]); }, {t});
    EXPECT_TRUE(r.ok) << c.name << " (strided): " << r.message;
  }
}

TEST(Elementwise, ReluAndClampGradientsAwayFromTheKinks) {
  // random_input keeps |x| >= 0.1, so eps = 1e-6 never crosses the kink at 0; clamp bounds at
  // +-0.05 sit inside the gap too.
  Tensor x = random_input({5, 6}, test_seed(), kFloat64, true);
  EXPECT_TRUE(gradcheck([](const TensorList& in) { return relu(in[0]); }, {x}).ok);
  EXPECT_TRUE(gradcheck([](const TensorList& in) { return clamp(in[0], -0.05, 0.05); }, {x}).ok);
  EXPECT_TRUE(gradcheck([](const TensorList& in) { return clamp(in[0], std::nullopt, 0.05); }, {x}).ok);
}

TEST(Elementwise, BinaryOpsBroadcastLikeNumpy) {
  uint64_t seed = test_seed();
  Tensor a = random_input({4, 1, 3}, seed, kFloat64);
  Tensor b = random_input({5, 1}, seed + 1, kFloat64);
  Tensor sum = a + b, prod = a * b, quot = a / b, diff = sub(a, b, 2.0);
  ASSERT_EQ(sum.sizes(), (Shape{4, 5, 3}));
  auto av = a.to_vector<double>(), bv = b.to_vector<double>();
  auto sv = sum.to_vector<double>(), pv = prod.to_vector<double>(), qv = quot.to_vector<double>(),
       dv = diff.to_vector<double>();
  for (int i = 0; i < 4; ++i) {
    for (int j = 0; j < 5; ++j) {
      for (int k = 0; k < 3; ++k) {
        int o = (i * 5 + j) * 3 + k;
        double x = av[i * 3 + k], y = bv[j];
        EXPECT_DOUBLE_EQ(sv[o], x + y);
        EXPECT_DOUBLE_EQ(pv[o], x * y);
        EXPECT_DOUBLE_EQ(qv[o], x / y);
        EXPECT_DOUBLE_EQ(dv[o], x - 2 * y);
      }
    }
  }
}

TEST(Elementwise, MixedDtypesPromoteAndScalarsDoNotWiden) {
  Tensor i = arange(6, {.dtype = kInt64});
  Tensor h = ones({6}, {.dtype = kFloat16});
  Tensor f = ones({6}, {.dtype = kFloat32});
  Tensor bf = ones({6}, {.dtype = kBFloat16});
  EXPECT_EQ((i + h).dtype(), kFloat16);
  EXPECT_EQ((h + f).dtype(), kFloat32);
  EXPECT_EQ((h + bf).dtype(), kFloat32);
  EXPECT_EQ((h * 2.0).dtype(), kFloat16);
  EXPECT_EQ((i * 2.0).dtype(), kInt64);
  EXPECT_EQ((i * 2.5).dtype(), kFloat32);
  EXPECT_EQ((i / 2.0).dtype(), kFloat32);
  EXPECT_EQ(div(i, i + 1.0).dtype(), kFloat32);
  EXPECT_EQ((i + i).to_vector<int64_t>(), (std::vector<int64_t>{0, 2, 4, 6, 8, 10}));
  EXPECT_TRUE(
      all_close(div(i, full({6}, 4.0, {.dtype = kInt64})), tensor<double>({0, 0.25, 0.5, 0.75, 1, 1.25})));
}

TEST(Elementwise, ComparisonsAndWhereMatchReferences) {
  uint64_t seed = test_seed();
  Tensor a = random_input({7, 3}, seed, kFloat32), b = random_input({3}, seed + 1, kFloat32);
  Tensor mask = gt(a, b);
  EXPECT_EQ(mask.dtype(), kBool);
  Tensor w = where(mask, a, b);
  auto av = a.to_vector<float>(), bv = b.to_vector<float>(), wv = w.to_vector<float>();
  auto mv = mask.to_vector<bool>();
  for (int i = 0; i < 7; ++i) {
    for (int k = 0; k < 3; ++k) {
      EXPECT_EQ(mv[i * 3 + k], av[i * 3 + k] > bv[k]);
      EXPECT_EQ(wv[i * 3 + k], std::max(av[i * 3 + k], bv[k]));
    }
  }
  EXPECT_EQ(le(a, 0.0).to_vector<bool>()[0], av[0] <= 0);
  EXPECT_EQ(eq(a, a).to(kInt64).sum().item<int64_t>(), 21);
}

TEST(Elementwise, BinaryOpsHaveCorrectGradientsWithBroadcasting) {
  uint64_t seed = test_seed();
  Tensor a = random_input({3, 1, 4}, seed, kFloat64, true);
  Tensor b = random_input({2, 1}, seed + 1, kFloat64, true);
  Tensor pa = abs(random_input({3, 2, 4}, seed + 2, kFloat64)).requires_grad_();
  using Fn = std::function<Tensor(const TensorList&)>;
  std::vector<std::pair<const char*, Fn>> cases = {
      {"add", [](const TensorList& t) { return add(t[0], t[1], 0.5); }},
      {"sub", [](const TensorList& t) { return t[0] - t[1]; }},
      {"mul", [](const TensorList& t) { return t[0] * t[1]; }},
      {"div", [](const TensorList& t) { return t[0] / t[1]; }},
      {"maximum", [](const TensorList& t) { return maximum(t[0], t[1]); }},
      {"minimum", [](const TensorList& t) { return minimum(t[0], t[1]); }},
      {"where", [](const TensorList& t) { return where(gt(t[0], 0.0), t[0], t[1]); }},
  };
  for (auto& [name, fn] : cases) {
    auto r = gradcheck(fn, {a, b});
    EXPECT_TRUE(r.ok) << name << ": " << r.message;
  }
  auto r = gradcheck([](const TensorList& t) { return pow(t[0], t[1]); }, {pa, b});
  EXPECT_TRUE(r.ok) << "pow: " << r.message;
}

TEST(Elementwise, GradientsFlowThroughChannelsLastInputs) {
  uint64_t seed = test_seed();
  Tensor x =
      random_input({2, 3, 2, 2}, seed, kFloat64).contiguous(MemoryFormat::ChannelsLast).requires_grad_();
  Tensor bias = random_input({1, 3, 1, 1}, seed + 1, kFloat64, true);
  auto r = gradcheck([](const TensorList& t) { return tanh(t[0] * t[1]) + sigmoid(t[0]); }, {x, bias});
  EXPECT_TRUE(r.ok) << r.message;
}

TEST(Elementwise, InPlaceOpsWriteIntoSelfAndBumpTheVersion) {
  uint64_t seed = test_seed();
  Tensor x = random_input({4, 3}, seed, kFloat32);
  Tensor y = random_input({3}, seed + 1, kFloat32);
  Tensor expected = x * 2.0 + y;
  uint32_t v0 = x.version();
  x.mul_(2.0);
  x += y;
  EXPECT_EQ(x.version(), v0 + 2);
  EXPECT_TRUE(all_close(x, expected));
  Tensor r = x.clone();
  r.relu_();
  EXPECT_TRUE(all_close(r, relu(x)));
  Tensor c = x.clone();
  c.clamp_(-0.2, 0.3);
  EXPECT_TRUE(all_close(c, clamp(x, -0.2, 0.3)));
}

TEST(Elementwise, InPlaceOpsOnNonLeavesHaveCorrectGradients) {
  uint64_t seed = test_seed();
  Tensor x = random_input({3, 4}, seed, kFloat64, true);
  Tensor w = random_input({4}, seed + 1, kFloat64, true);
  auto fn = [](const TensorList& t) {
    Tensor h = t[0] * 1.0;  // a non-leaf copy to modify
    h.mul_(t[1]);
    h.add_(t[1], 0.5);
    h.clamp_(-1.0, 1.5);
    h.mul_(3.0);
    h.relu_();  // last: relu_ saves its output, so a later in-place write would be refused
    return h;
  };
  auto r = gradcheck(fn, {x, w});
  EXPECT_TRUE(r.ok) << r.message;
}

TEST(Elementwise, WritingAfterReluInPlaceIsCaught) {
  Tensor x = random_input({4}, test_seed(), kFloat64, true);
  Tensor h = x * 1.0;
  h.relu_();
  Tensor loss = h.sum();
  h.add_(1.0);
  EXPECT_NABLA_ERROR(loss.backward(), "ReluBackward", "modified by an in-place operation");
}

TEST(Elementwise, BadInputsGiveClearErrors) {
  Tensor a = ones({2, 3}), b = ones({4});
  EXPECT_NABLA_ERROR(a + b, "add", "[2, 3]", "[4]", "cannot be broadcast");
  Tensor i = arange(3, {.dtype = kInt64});
  EXPECT_NABLA_ERROR(i.add_(ones({3})), "add_", "float32", "int64");
  Tensor small = ones({3});
  EXPECT_NABLA_ERROR(small.add_(ones({2, 3})), "add_", "[2, 3]", "cannot be written into self");
  EXPECT_NABLA_ERROR(where(ones({3}), a, a), "where", "condition must be a bool tensor");
  EXPECT_NABLA_ERROR(clamp(a, 2.0, 1.0), "clamp", "min 2 is greater than max 1");
  EXPECT_NABLA_ERROR(exp(Tensor()), "exp", "undefined tensor");
}

}  // namespace
}  // namespace nabla
