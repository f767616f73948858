// Gradient clipping against norms computed by hand, and EMA values against a loop.
#include <gtest/gtest.h>

#include <cmath>

#include "test_util.h"

namespace nabla::testing {
namespace {

TensorList params_with_grads(uint64_t seed) {
  TensorList params = {random_input({3, 4}, seed, kFloat64, true),
                       random_input({5}, seed + 1, kFloat64, true),
                       random_input({2}, seed + 2, kFloat64, true)};
  params[0].set_grad(random_input({3, 4}, seed + 10));
  params[1].set_grad(random_input({5}, seed + 11));  // params[2] has no gradient
  return params;
}

double manual_norm(const TensorList& params, double p) {
  double acc = 0.0;
  for (const auto& t : params) {
    if (!t.grad().defined()) continue;
    for (double v : t.grad().to_vector<double>())
      acc = std::isinf(p) ? std::max(acc, std::abs(v)) : acc + std::pow(std::abs(v), p);
  }
  return std::isinf(p) ? acc : std::pow(acc, 1.0 / p);
}

void check_clip(double max_norm, double p, uint64_t seed) {
  auto params = params_with_grads(seed);
  const double total = manual_norm(params, p);
  std::vector<std::vector<double>> before = {params[0].grad().to_vector<double>(),
                                             params[1].grad().to_vector<double>()};
  Tensor norm = optim::clip_grad_norm_(params, max_norm, p);
  EXPECT_EQ(norm.dim(), 0);
  EXPECT_NEAR(norm.item<double>(), total, 1e-10 * total);
  const double coef = std::min(1.0, max_norm / (total + 1e-6));
  for (size_t i = 0; i < 2; ++i) {
    for (auto& v : before[i]) v *= coef;
    EXPECT_TRUE(all_close(params[i].grad(), tensor<double>(before[i], params[i].sizes()), 1e-12));
  }
  EXPECT_FALSE(params[2].grad().defined());
}

TEST(OptimClip, GlobalL2NormClips) {
  check_clip(0.5, 2.0, test_seed());
}
TEST(OptimClip, GlobalL2NormBelowMaxLeavesGradients) {
  check_clip(1e6, 2.0, test_seed());
}
TEST(OptimClip, L1AndInfNorms) {
  check_clip(0.3, 1.0, test_seed());
  check_clip(0.3, optim::kInfNorm, test_seed() + 1);
  check_clip(0.3, 3.0, test_seed() + 2);
}

TEST(OptimClip, ClipByValue) {
  auto params = params_with_grads(test_seed());
  auto before = params[0].grad().to_vector<double>();
  optim::clip_grad_value_(params, 0.7);
  for (auto& v : before) v = std::clamp(v, -0.7, 0.7);
  EXPECT_TRUE(all_close(params[0].grad(), tensor<double>(before, {3, 4})));
  EXPECT_NABLA_ERROR(optim::clip_grad_value_(params, -1.0), "clip_value");
}

TEST(OptimEma, UpdateStoreCopyRestore) {
  const uint64_t seed = test_seed();
  TensorList params = {random_input({4}, seed, kFloat64, true),
                       random_input({2, 2}, seed + 1, kFloat64, true)};
  const double decay = 0.75;
  optim::ExponentialMovingAverage ema(params, {.decay = decay});
  std::vector<std::vector<double>> shadow = {params[0].to_vector<double>(), params[1].to_vector<double>()};
  for (int s = 0; s < 3; ++s) {
    {
      NoGradGuard no_grad;
      for (size_t i = 0; i < 2; ++i)
        params[i].copy_(random_input(params[i].sizes(), seed + 100 * (s + 1) + i));
    }
    ema.update();
    for (size_t i = 0; i < 2; ++i) {
      auto w = params[i].to_vector<double>();
      for (size_t k = 0; k < w.size(); ++k) shadow[i][k] = decay * shadow[i][k] + (1 - decay) * w[k];
    }
  }
  EXPECT_EQ(ema.num_updates(), 3);
  auto live = params[1].to_vector<double>();
  ema.store();
  ema.copy_to();
  for (size_t i = 0; i < 2; ++i)
    EXPECT_TRUE(all_close(params[i].detach(), tensor<double>(shadow[i], params[i].sizes()), 1e-12));
  ema.restore();
  EXPECT_TRUE(all_close(params[1].detach(), tensor<double>(live, {2, 2}), 0.0, 0.0));
  EXPECT_NABLA_ERROR(ema.restore(), "store");

  optim::ExponentialMovingAverage other(params, {.decay = decay});
  other.load_state_dict(ema.state_dict());
  EXPECT_TRUE(all_close(other.shadow()[0], ema.shadow()[0], 0.0, 0.0));
}

}  // namespace
}  // namespace nabla::testing
