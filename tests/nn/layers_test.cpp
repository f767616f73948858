// Each layer against its functional op computed another way, default init bounds, a gradcheck
// of a tiny module, and the initializers' statistics.
#include <gtest/gtest.h>

#include <cmath>

#include "test_util.h"

namespace nb = nabla;
namespace nn = nabla::nn;
using nabla::testing::all_close;
using nabla::testing::random_input;
using nabla::testing::test_seed;

namespace {

const nb::TensorOptions kF64{.dtype = nb::kFloat64};

double mean_of(const nb::Tensor& t) {
  return t.to(nb::kFloat64).mean().item<double>();
}
double std_of(const nb::Tensor& t) {
  nb::Tensor d = t.to(nb::kFloat64) - mean_of(t);
  return std::sqrt((d * d).mean().item<double>());
}
double max_abs(const nb::Tensor& t) {
  return nb::max(t.abs()).to(nb::kFloat64).item<double>();
}

}  // namespace

TEST(Layers, LinearIsMatmulPlusBias) {
  nn::Linear fc({.in = 6, .out = 4, .tensor_options = kF64});
  nb::Tensor x = random_input({2, 3, 6}, test_seed());
  nb::Tensor expected =
      (x.reshape({6, 6}).matmul(fc.weight.t()) + fc.bias.reshape({1, 4})).reshape({2, 3, 4});
  EXPECT_TRUE(all_close(fc(x), expected, 1e-12, 1e-12));
  // PyTorch's default init: U(-1/sqrt(in), 1/sqrt(in)) for weight and bias.
  EXPECT_LE(max_abs(fc.weight), 1 / std::sqrt(6.0));
  EXPECT_LE(max_abs(fc.bias), 1 / std::sqrt(6.0));
  nn::Linear nobias({.in = 3, .out = 2, .bias = false});
  EXPECT_EQ(nobias.parameters().size(), 1u);
}

TEST(Layers, Conv2dMatchesUnfoldedMatmul) {
  nn::Conv2d conv(
      {.in = 2, .out = 3, .kernel = {3, 2}, .stride = {2, 1}, .padding = 1, .tensor_options = kF64});
  nb::Tensor x = random_input({1, 2, 5, 4}, test_seed());
  nb::Tensor y = conv(x);
  // Direct sum over the window, element by element.
  nb::Tensor xp = nb::zeros({1, 2, 7, 6}, kF64);
  xp.narrow(2, 1, 5).narrow(3, 1, 4).copy_(x);
  std::vector<double> xv = xp.contiguous().to_vector<double>(),
                      wv = conv.weight.contiguous().to_vector<double>(), bv = conv.bias.to_vector<double>();
  int64_t ho = (5 + 2 - 3) / 2 + 1, wo = (4 + 2 - 2) / 1 + 1;
  ASSERT_EQ(y.sizes(), (nb::Shape{1, 3, ho, wo}));
  std::vector<double> expected;
  for (int64_t o = 0; o < 3; ++o)
    for (int64_t i = 0; i < ho; ++i)
      for (int64_t j = 0; j < wo; ++j) {
        double s = bv[o];
        for (int64_t c = 0; c < 2; ++c)
          for (int64_t a = 0; a < 3; ++a)
            for (int64_t b = 0; b < 2; ++b)
              s += wv[((o * 2 + c) * 3 + a) * 2 + b] * xv[(c * 7 + i * 2 + a) * 6 + j + b];
        expected.push_back(s);
      }
  EXPECT_TRUE(all_close(y, nb::tensor<double>(expected, {1, 3, ho, wo}), 1e-12, 1e-12));
  EXPECT_LE(max_abs(conv.weight), 1 / std::sqrt(2.0 * 3 * 2));
  EXPECT_NABLA_ERROR(nn::Conv2d({.in = 3, .out = 4, .kernel = 3, .groups = 2}), "divisible by groups");
}

TEST(Layers, BatchNorm2dTrainAndEval) {
  nn::BatchNorm2d bn(3, {.momentum = 0.2, .tensor_options = kF64});
  {
    nb::NoGradGuard no_grad;
    bn.weight.copy_(random_input({3}, test_seed() + 1));
    bn.bias.copy_(random_input({3}, test_seed() + 2));
  }
  nb::Tensor x = random_input({4, 3, 2, 5}, test_seed());
  nb::Tensor mean = x.mean({0, 2, 3}, true);
  nb::Tensor var = ((x - mean) * (x - mean)).mean({0, 2, 3}, true);
  nb::Tensor w = bn.weight.reshape({1, 3, 1, 1}), b = bn.bias.reshape({1, 3, 1, 1});
  EXPECT_TRUE(all_close(bn(x), (x - mean) / (var + 1e-5).sqrt() * w + b, 1e-10, 1e-10));
  // Running stats: 0.8 * init + 0.2 * batch (unbiased variance).
  double n = 4 * 2 * 5;
  EXPECT_TRUE(all_close(bn.running_mean, mean.reshape({3}) * 0.2, 1e-12, 1e-12));
  EXPECT_TRUE(all_close(bn.running_var, var.reshape({3}) * (n / (n - 1)) * 0.2 + 0.8, 1e-12, 1e-12));
  EXPECT_EQ(bn.num_batches_tracked.item<int64_t>(), 1);
  bn.eval();
  nb::Tensor rm = bn.running_mean.reshape({1, 3, 1, 1}), rv = bn.running_var.reshape({1, 3, 1, 1});
  EXPECT_TRUE(all_close(bn(x), (x - rm) / (rv + 1e-5).sqrt() * w + b, 1e-10, 1e-10));
  nb::Tensor r = random_input({4, 3, 2, 5}, test_seed() + 3);
  EXPECT_TRUE(all_close(bn.forward_add_relu(x, r), nb::relu(bn(x) + r), 1e-12, 1e-12));
  EXPECT_TRUE(all_close(bn.forward_relu(x), nb::relu(bn(x)), 1e-12, 1e-12));
  EXPECT_GT(nb::eq(nb::relu(bn(x)), 0.0).to(nb::kFloat64).sum().item<double>(), 0);  // the ReLU cut something

  nn::BatchNorm2d plain(3, {.affine = false, .track_running_stats = false});
  EXPECT_TRUE(plain.parameters().empty() && plain.buffers().empty());
  plain.eval();  // no running stats: batch statistics even in eval
  nb::Tensor xf = x.to(nb::kFloat32);
  EXPECT_TRUE(all_close(plain(xf), ((x - mean) / (var + 1e-5).sqrt()), 1e-4, 1e-5));
}

TEST(Layers, ActivationsPoolsAndShapes) {
  nb::Tensor x = random_input({2, 3, 6, 6}, test_seed());
  EXPECT_TRUE(all_close(nn::ReLU()(x), nb::maximum(x, nb::zeros_like(x)), 0, 0));
  EXPECT_TRUE(all_close(nn::SiLU()(x), x / (1 + (-x).exp()), 1e-12, 1e-12));
  // erf-based GELU, written with tanh's cousin: 0.5 x (1 + erf(x / sqrt 2)), checked by value.
  std::vector<double> xv = x.to_vector<double>(), g;
  for (double v : xv) g.push_back(0.5 * v * (1 + std::erf(v / std::sqrt(2.0))));
  EXPECT_TRUE(all_close(nn::GELU()(x), nb::tensor<double>(g, x.sizes()), 1e-10, 1e-12));
  nb::Tensor y = x.clone();
  nn::ReLU inplace({.inplace = true});
  nb::Tensor out = inplace(y);
  EXPECT_TRUE(out.is_same(y) || out.data_ptr() == y.data_ptr());
  EXPECT_TRUE(all_close(y, nb::relu(x), 0, 0));

  // Pools against reshapes: non-overlapping 2x2 windows.
  nb::Tensor windows = x.reshape({2, 3, 3, 2, 3, 2}).permute({0, 1, 2, 4, 3, 5}).reshape({2, 3, 3, 3, 4});
  EXPECT_TRUE(all_close(nn::AvgPool2d({.kernel = 2})(x), windows.mean({4}), 1e-12, 1e-12));
  EXPECT_TRUE(all_close(nn::MaxPool2d({.kernel = 2})(x), nb::max(windows, 4).first, 0, 0));
  EXPECT_TRUE(all_close(nn::AdaptiveAvgPool2d({1, 1})(x), x.mean({2, 3}, true), 1e-12, 1e-12));
  EXPECT_EQ(nn::Flatten()(x).sizes(), (nb::Shape{2, 108}));
  EXPECT_TRUE(nn::Identity()(x).is_same(x));

  nn::Dropout drop(0.5);
  nb::Tensor d = drop(x);
  std::vector<double> dv = d.to_vector<double>();
  int zeros = 0;
  for (size_t i = 0; i < dv.size(); ++i) {
    if (dv[i] == 0) {
      ++zeros;
    } else {
      EXPECT_NEAR(dv[i], 2 * xv[i], 1e-12);
    }
  }
  EXPECT_GT(zeros, 0);
  drop.eval();
  EXPECT_TRUE(all_close(drop(x), x, 0, 0));
}

TEST(Layers, LayerNormAndEmbedding) {
  nn::LayerNorm ln({4}, {.tensor_options = kF64});
  {
    nb::NoGradGuard no_grad;
    ln.weight.copy_(random_input({4}, test_seed() + 1));
    ln.bias.copy_(random_input({4}, test_seed() + 2));
  }
  nb::Tensor x = random_input({3, 4}, test_seed());
  nb::Tensor mean = x.mean({1}, true), var = ((x - mean) * (x - mean)).mean({1}, true);
  EXPECT_TRUE(all_close(ln(x), (x - mean) / (var + 1e-5).sqrt() * ln.weight + ln.bias, 1e-10, 1e-10));

  nn::Embedding emb(5, 3, {.padding_idx = 1});
  EXPECT_EQ(nb::max(emb.weight.select(0, 1).abs()).item<float>(), 0.0f);
  nb::Tensor idx = nb::tensor<int64_t>({4, 0, 4}, {3});
  nb::Tensor e = emb(idx);
  EXPECT_TRUE(all_close(e.select(0, 0), emb.weight.select(0, 4), 0, 0));
  EXPECT_TRUE(all_close(e.select(0, 1), emb.weight.select(0, 0), 0, 0));
}

TEST(Layers, GradcheckOfTinyModule) {
  nn::Sequential net;
  auto& conv = net.emplace_back<nn::Conv2d>(
      nn::Conv2dOptions{.in = 2, .out = 3, .kernel = 3, .padding = 1, .tensor_options = kF64});
  auto& bn = net.emplace_back<nn::BatchNorm2d>(3, nn::BatchNorm2dOptions{.tensor_options = kF64});
  net.emplace_back<nn::SiLU>();
  net.emplace_back<nn::AdaptiveAvgPool2d>(nb::PoolPair{1, 1});
  net.emplace_back<nn::Flatten>();
  auto& fc = net.emplace_back<nn::Linear>(nn::LinearOptions{.in = 3, .out = 2, .tensor_options = kF64});
  net.eval();  // running stats: a pure function of the inputs
  nb::Tensor x = random_input({2, 2, 4, 4}, test_seed(), nb::kFloat64, true);
  nb::TensorList inputs{x, conv.weight, conv.bias, bn.weight, bn.bias, fc.weight, fc.bias};
  ASSERT_EQ(inputs.size(), net.parameters().size() + 1);
  auto fn = [&](const nb::TensorList& in) {
    // gradcheck passes perturbed copies: point the module's members at them.
    conv.weight = in[1], conv.bias = in[2], bn.weight = in[3], bn.bias = in[4], fc.weight = in[5],
    fc.bias = in[6];
    return net(in[0]);
  };
  auto result = nb::gradcheck(fn, inputs);
  EXPECT_TRUE(result.ok) << result.message;
}

TEST(Init, KaimingAndXavierStatistics) {
  nb::Generator gen(test_seed());
  nb::Tensor w = nb::empty({256, 128, 3, 3});
  int64_t fan_in = 128 * 9, fan_out = 256 * 9;
  nn::init::kaiming_normal_(w, {.mode = nn::init::FanMode::fan_out}, &gen);
  EXPECT_NEAR(mean_of(w), 0.0, 1e-3);
  EXPECT_NEAR(std_of(w) / std::sqrt(2.0 / fan_out), 1.0, 0.01);
  nn::init::kaiming_uniform_(w, {}, &gen);
  double bound = std::sqrt(6.0 / fan_in);
  EXPECT_LE(max_abs(w), bound);
  EXPECT_NEAR(std_of(w) / (bound / std::sqrt(3.0)), 1.0, 0.01);
  nn::init::kaiming_uniform_(w, {.a = std::sqrt(5.0), .nonlinearity = nn::init::Nonlinearity::leaky_relu},
                             &gen);
  EXPECT_LE(max_abs(w), 1 / std::sqrt(static_cast<double>(fan_in)));
  nn::init::xavier_normal_(w, {.gain = 2.0}, &gen);
  EXPECT_NEAR(std_of(w) / (2.0 * std::sqrt(2.0 / (fan_in + fan_out))), 1.0, 0.01);
  nn::init::xavier_uniform_(w, {}, &gen);
  EXPECT_LE(max_abs(w), std::sqrt(6.0 / (fan_in + fan_out)));
  EXPECT_NEAR(std_of(w) / std::sqrt(2.0 / (fan_in + fan_out)), 1.0, 0.01);
  nb::Tensor vec = nb::empty({3});
  EXPECT_NABLA_ERROR(nn::init::kaiming_normal_(vec), "at least 2 dims");
  // Same generator state, same values.
  nb::Generator g1(7), g2(7);
  nb::Tensor a = nb::empty({4, 4}), b = nb::empty({4, 4});
  EXPECT_TRUE(all_close(nn::init::kaiming_normal_(a, {}, &g1), nn::init::kaiming_normal_(b, {}, &g2), 0, 0));
}

TEST(Init, TruncNormalAndConstants) {
  nb::Generator gen(test_seed());
  nb::Tensor w = nb::empty({200000});
  nn::init::trunc_normal_(w, {.mean = 0.5, .std = 1.0, .a = 0.0, .b = 1.0}, &gen);
  EXPECT_GE(nb::min(w).item<float>(), 0.0f);
  EXPECT_LE(nb::max(w).item<float>(), 1.0f);
  // N(0.5, 1) truncated to [0.5 - 0.5, 0.5 + 0.5]: mean 0.5, variance 1 - 2 * 0.5 phi(0.5) / (2 Phi(0.5) -
  // 1).
  double phi = std::exp(-0.125) / std::sqrt(2 * M_PI), Phi = 0.5 * (1 + std::erf(0.5 / std::sqrt(2.0)));
  EXPECT_NEAR(mean_of(w), 0.5, 3e-3);
  EXPECT_NEAR(std_of(w), std::sqrt(1 - 2 * 0.5 * phi / (2 * Phi - 1)), 3e-3);
  nn::init::trunc_normal_(w, {.std = 0.02}, &gen);  // bounds +-2 are 100 std away: a plain normal
  EXPECT_NEAR(std_of(w) / 0.02, 1.0, 0.01);
  nb::Tensor c = nb::empty({3, 2});
  EXPECT_TRUE(all_close(nn::init::constant_(c, -1.5), nb::full({3, 2}, -1.5), 0, 0));
  EXPECT_TRUE(all_close(nn::init::zeros_(c), nb::zeros({3, 2}), 0, 0));
  EXPECT_TRUE(all_close(nn::init::ones_(c), nb::ones({3, 2}), 0, 0));
  EXPECT_NEAR(nn::init::calculate_gain(nn::init::Nonlinearity::tanh), 5.0 / 3.0, 1e-12);
  EXPECT_NEAR(nn::init::calculate_gain(nn::init::Nonlinearity::leaky_relu, 0.2), std::sqrt(2.0 / 1.04),
              1e-12);
}
