// dropout on the CPU: the mask is the generator's Bernoulli draw (reproducible per seed, in
// logical element order whatever the layout), kept elements are scaled by 1 / (1 - p), the
// gradient uses the same mask, the edge probabilities, and errors.
#include <cmath>

#include "test_util.h"

namespace nabla {
namespace {

using namespace testing;  // NOLINT: test helpers

// The expected output from the mask drawn another way: bernoulli from the same seed.
Tensor expected_dropout(const Tensor& x, double p, uint64_t seed) {
  Generator gen(seed);
  const std::vector<double> keep =
      bernoulli(x.sizes(), 1.0 - p, {.dtype = kFloat64}, &gen).to_vector<double>();
  std::vector<double> v = x.to(kFloat64).contiguous().to_vector<double>();
  for (size_t i = 0; i < v.size(); ++i) v[i] = keep[i] != 0.0 ? v[i] / (1.0 - p) : 0.0;
  return tensor<double>(v, x.sizes());
}

TEST(Dropout, KeepsTheBernoulliDrawOfTheSeedAndScalesByOneOverOneMinusP) {
  const uint64_t seed = test_seed();
  const Tensor x = random_input({4, 5, 6}, seed);
  for (double p : {0.1, 0.5, 0.9}) {
    Generator gen(seed + 1);
    EXPECT_TRUE(
        all_close(dropout(x, {.p = p, .generator = &gen}), expected_dropout(x, p, seed + 1), 1e-15, 0))
        << p;
  }
}

TEST(Dropout, SameSeedSameMaskAndTheGeneratorAdvances) {
  const Tensor x = random_input({1000}, test_seed());
  Generator a(7), b(7);
  const Tensor first = dropout(x, {.p = 0.5, .generator = &a});
  EXPECT_TRUE(all_close(first, dropout(x, {.p = 0.5, .generator = &b}), 0, 0));
  EXPECT_FALSE(
      all_close(first, dropout(x, {.p = 0.5, .generator = &a}), 0, 0));  // the next call draws new numbers
}

TEST(Dropout, KeepsAboutOneMinusPOfTheElements) {
  const int64_t n = 200000;
  const Tensor x = ones({n}, {.dtype = kFloat32});
  Generator gen(test_seed());
  const double kept =
      sum(ne(dropout(x, {.p = 0.3, .generator = &gen}), 0.0)).item<double>() / static_cast<double>(n);
  EXPECT_NEAR(kept, 0.7, 4 * std::sqrt(0.7 * 0.3 / n));
}

TEST(Dropout, ChannelsLastKeepsItsLayoutAndTheLogicalMask) {
  const uint64_t seed = test_seed();
  const Tensor x = random_input({2, 3, 4, 5}, seed);
  Generator a(seed), b(seed);
  const Tensor y = dropout(x.contiguous(MemoryFormat::ChannelsLast), {.p = 0.4, .generator = &a});
  EXPECT_TRUE(y.is_contiguous(MemoryFormat::ChannelsLast));
  EXPECT_TRUE(all_close(y, dropout(x, {.p = 0.4, .generator = &b}), 0, 0));
}

TEST(Dropout, GradientIsTheGradientThroughTheSameMask) {
  const uint64_t seed = test_seed();
  Tensor x = random_input({6, 7}, seed, kFloat64, true);
  Generator gen(seed + 1);
  Tensor y = dropout(x, {.p = 0.3, .generator = &gen});
  const Tensor g = random_input({6, 7}, seed + 2);
  y.backward(g);
  // x has no zeros, so y != 0 exactly where the element was kept.
  const Tensor kept = ne(y.detach(), 0.0).to(kFloat64);
  EXPECT_TRUE(all_close(x.grad(), g * kept / 0.7, 1e-15, 0));
  GradcheckResult r = gradcheck(
      [&](const TensorList& in) {
        Generator fixed(seed + 1);  // the same mask in every evaluation
        return dropout(in[0], {.p = 0.3, .generator = &fixed});
      },
      {x});
  EXPECT_TRUE(r.ok) << r.message;
}

TEST(Dropout, EdgeProbabilitiesAndEvalMode) {
  Tensor x = random_input({3, 4}, test_seed(), kFloat32, true);
  EXPECT_TRUE(dropout(x, {.p = 0.0}).is_same(x));
  EXPECT_TRUE(dropout(x, {.p = 0.5, .training = false}).is_same(x));
  Tensor zero = dropout(x, {.p = 1.0});
  EXPECT_TRUE(all_close(zero, zeros({3, 4}), 0, 0));
  zero.sum().backward();
  EXPECT_TRUE(all_close(x.grad(), zeros({3, 4}), 0, 0));
  EXPECT_EQ(dropout(x.to(kFloat16), {.p = 0.5}).dtype(), kFloat16);
}

TEST(Dropout, BadArgumentsGiveClearErrors) {
  const Tensor x = random_input({3}, test_seed());
  EXPECT_NABLA_ERROR(dropout(x, {.p = 1.5}), "dropout", "[0, 1]", "1.5");
  EXPECT_NABLA_ERROR(dropout(x, {.p = -0.1}), "dropout", "[0, 1]");
  EXPECT_NABLA_ERROR(dropout(x.to(kInt64), {.p = 0.5}), "dropout", "floating-point", "int64");
}

}  // namespace
}  // namespace nabla
