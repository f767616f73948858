// GradScaler on the CPU: scaling, unscaling, the skip on injected inf/NaN, growth and backoff,
// static mode, the overflow report, and its state dict. Every expected value is computed by
// hand from the options (powers of two, so the float arithmetic is exact).
#include <gtest/gtest.h>

#include <limits>

#include "test_util.h"

namespace nabla::testing {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

struct Problem {
  Tensor w, b;  // float32 leaves
  Tensor x;
};

Problem make_problem(uint64_t seed, DType dtype = kFloat32) {
  return {random_input({3, 4}, seed, dtype, true), random_input({3}, seed + 1, dtype, true),
          random_input({5, 4}, seed + 2, dtype)};
}

Tensor loss_of(const Problem& p) {
  return sum(linear(p.x, p.w, p.b));
}

// Sets one element of the leaf's gradient to `value` (an overflow in backward).
void inject(Tensor leaf, double value) {
  NoGradGuard no_grad;
  Tensor element = leaf.mutable_grad().view({-1}).narrow(0, 1, 1);
  element.fill_(value);
}

TEST(AmpGradScaler, ScalesTheLossAndUnscalesTheGradients) {
  Problem p = make_problem(test_seed());
  amp::GradScaler scaler({.init_scale = 1024.0});
  const Tensor loss = loss_of(p);
  const Tensor scaled = scaler.scale(loss);
  EXPECT_TRUE(all_close(scaled, loss * 1024.0, 0.0, 0.0));
  scaled.backward();
  // d sum(x w^T + b) / dw = column sums of x, repeated for each output row.
  const Tensor expected_w = sum(p.x, {0}, true).expand({3, 4});
  EXPECT_TRUE(all_close(p.w.grad(), expected_w * 1024.0, 1e-6, 1e-5));
  optim::SGD opt({p.w, p.b}, {.lr = 0.5});
  scaler.unscale_(opt);
  EXPECT_TRUE(all_close(p.w.grad(), expected_w, 1e-6, 1e-6));
  EXPECT_TRUE(all_close(p.b.grad(), full({3}, 5.0), 0.0, 0.0));
  const Tensor w_before = p.w.detach().clone();
  scaler.step(opt);
  EXPECT_FALSE(scaler.found_inf());  // no second unscale: step sees unscale_ already ran
  EXPECT_TRUE(all_close(p.w, w_before - expected_w * 0.5, 1e-6, 1e-6));
  scaler.update();
  EXPECT_EQ(scaler.get_scale(), 1024.0);
  EXPECT_EQ(scaler.growth_tracker(), 1);
}

TEST(AmpGradScaler, GrowsAfterGrowthIntervalGoodSteps) {
  Problem p = make_problem(test_seed());
  amp::GradScaler scaler({.init_scale = 8.0, .growth_factor = 4.0, .growth_interval = 3});
  optim::SGD opt({p.w, p.b}, {.lr = 0.01});
  const double expected_scale[] = {8, 8, 32, 32, 32, 128};
  const int64_t expected_tracker[] = {1, 2, 0, 1, 2, 0};
  for (int i = 0; i < 6; ++i) {
    opt.zero_grad();
    scaler.scale(loss_of(p)).backward();
    scaler.step(opt);
    EXPECT_FALSE(scaler.found_inf());
    scaler.update();
    EXPECT_EQ(scaler.get_scale(), expected_scale[i]) << "step " << i;
    EXPECT_EQ(scaler.growth_tracker(), expected_tracker[i]) << "step " << i;
  }
}

void expect_skip_on(double bad_value, DType dtype) {
  Problem p = make_problem(test_seed(), dtype);
  amp::GradScaler scaler({.init_scale = 64.0, .growth_interval = 2});
  optim::SGD opt({p.w, p.b}, {.lr = 0.1, .momentum = 0.9});
  // One good step first, so the tracker has something to reset.
  scaler.scale(loss_of(p)).backward();
  scaler.step(opt);
  EXPECT_FALSE(scaler.found_inf());
  scaler.update();
  EXPECT_EQ(scaler.growth_tracker(), 1);

  opt.zero_grad();
  scaler.scale(loss_of(p)).backward();
  inject(p.b, bad_value);
  const Tensor w_before = p.w.detach().clone(), b_before = p.b.detach().clone();
  scaler.step(opt);
  EXPECT_TRUE(scaler.found_inf());
  EXPECT_TRUE(all_close(p.w, w_before, 0.0, 0.0));  // nothing moved, not even the clean w
  EXPECT_TRUE(all_close(p.b, b_before, 0.0, 0.0));
  scaler.update();
  EXPECT_EQ(scaler.get_scale(), 32.0);
  EXPECT_EQ(scaler.growth_tracker(), 0);

  // The next clean step goes through with the backed-off scale.
  opt.zero_grad();
  scaler.scale(loss_of(p)).backward();
  scaler.step(opt);
  EXPECT_FALSE(scaler.found_inf());
  scaler.update();
  EXPECT_EQ(scaler.get_scale(), 32.0);
  EXPECT_EQ(scaler.growth_tracker(), 1);
  EXPECT_FALSE(all_close(p.w, w_before, 0.0, 0.0));
}

TEST(AmpGradScaler, SkipsTheStepAndBacksOffOnInf) {
  expect_skip_on(kInf, kFloat32);
  expect_skip_on(-kInf, kFloat32);
}

TEST(AmpGradScaler, SkipsTheStepAndBacksOffOnNaN) {
  expect_skip_on(kNaN, kFloat32);
}

TEST(AmpGradScaler, ChecksBFloat16GradientsToo) {
  expect_skip_on(kInf, kBFloat16);
  expect_skip_on(kNaN, kBFloat16);
}

TEST(AmpGradScaler, StaticScaleNeverChangesButStillSkips) {
  Problem p = make_problem(test_seed());
  amp::GradScaler scaler({.init_scale = 16.0, .growth_interval = 1, .dynamic = false});
  optim::SGD opt({p.w, p.b}, {.lr = 0.1});
  for (int i = 0; i < 3; ++i) {
    opt.zero_grad();
    scaler.scale(loss_of(p)).backward();
    if (i == 1) inject(p.w, kInf);
    scaler.step(opt);
    EXPECT_EQ(!scaler.found_inf(), i != 1);
    scaler.update();
    EXPECT_EQ(scaler.get_scale(), 16.0);
  }
}

TEST(AmpGradScaler, ReportsWhichParametersOverflowedOnRequest) {
  Problem p = make_problem(test_seed());
  amp::GradScaler scaler;
  optim::SGD opt({p.w, p.b}, {.lr = 0.1});
  scaler.scale(loss_of(p)).backward();
  inject(p.b, kNaN);
  {
    NoGradGuard no_grad;
    Tensor element = p.b.mutable_grad().narrow(0, 2, 1);
    element.fill_(kInf);
  }
  scaler.step(opt);
  EXPECT_TRUE(scaler.found_inf());
  const auto report = scaler.overflowed_parameters(opt, {{"fc.weight", p.w}, {"fc.bias", p.b}});
  ASSERT_EQ(report.size(), 1u);
  EXPECT_EQ(report[0].name, "fc.bias");
  EXPECT_EQ(report[0].group, 0u);
  EXPECT_EQ(report[0].index, 1u);
  EXPECT_EQ(report[0].shape, (Shape{3}));
  EXPECT_EQ(report[0].nonfinite, 2);
  scaler.update();
}

TEST(AmpGradScaler, StateDictRoundTrips) {
  Problem p = make_problem(test_seed());
  amp::GradScaler scaler(
      {.init_scale = 256.0, .growth_factor = 3.0, .backoff_factor = 0.25, .growth_interval = 5});
  optim::SGD opt({p.w, p.b}, {.lr = 0.1});
  for (int i = 0; i < 2; ++i) {
    opt.zero_grad();
    scaler.scale(loss_of(p)).backward();
    scaler.step(opt);
    scaler.update();
  }
  const auto state = scaler.state_dict();
  EXPECT_EQ(state.at("scale").item<double>(), 256.0);
  EXPECT_EQ(state.at("growth_tracker").item<double>(), 2.0);
  amp::GradScaler restored;
  restored.load_state_dict(state);
  EXPECT_EQ(restored.get_scale(), 256.0);
  EXPECT_EQ(restored.growth_tracker(), 2);
  EXPECT_EQ(restored.options().growth_factor, 3.0);
  EXPECT_EQ(restored.options().backoff_factor, 0.25);
  EXPECT_EQ(restored.options().growth_interval, 5);
  // Three more good steps reach the interval: the restored scaler grows exactly like the original.
  for (auto* s : {&scaler, &restored}) {
    for (int i = 0; i < 3; ++i) {
      opt.zero_grad();
      s->scale(loss_of(p)).backward();
      s->step(opt);
      s->update();
    }
  }
  EXPECT_EQ(scaler.get_scale(), 768.0);
  EXPECT_EQ(restored.get_scale(), 768.0);
  // It also survives a safetensors file.
  const std::string path = ::testing::TempDir() + "/scaler.safetensors";
  save_safetensors(path, scaler.state_dict());
  amp::GradScaler from_file;
  from_file.load_state_dict(load_safetensors(path).tensors);
  EXPECT_EQ(from_file.get_scale(), 768.0);

  auto missing = state;
  missing.erase("scale");
  EXPECT_NABLA_ERROR(restored.load_state_dict(missing), "missing key 'scale'");
  auto bad = state;
  bad["backoff_factor"] = full({}, 2.0, {.dtype = kFloat64});
  EXPECT_NABLA_ERROR(restored.load_state_dict(bad), "backoff_factor must be in (0, 1)");
}

TEST(AmpGradScaler, RejectsMisuseWithClearErrors) {
  EXPECT_NABLA_ERROR(amp::GradScaler({.init_scale = 0.0}), "init_scale must be a finite positive number");
  EXPECT_NABLA_ERROR(amp::GradScaler({.growth_factor = 1.0}), "growth_factor must be > 1");
  EXPECT_NABLA_ERROR(amp::GradScaler({.growth_interval = 0}), "growth_interval must be >= 1");
  Problem p = make_problem(test_seed());
  amp::GradScaler scaler;
  optim::SGD opt({p.w, p.b}, {.lr = 0.1});
  EXPECT_NABLA_ERROR(scaler.update(), "no step() or unscale_() since the last update()");
  scaler.scale(loss_of(p)).backward();
  scaler.unscale_(opt);
  EXPECT_NABLA_ERROR(scaler.unscale_(opt), "already called for this optimizer");
  scaler.step(opt);
  EXPECT_NABLA_ERROR(scaler.step(opt), "already called for this optimizer");
  scaler.update();
  EXPECT_NABLA_ERROR(scaler.scale(randint(0, 3, {2})), "expected a floating-point loss");
}

TEST(AmpGradScaler, WarnsOnceWhenBFloat16AutocastMakesItNeedless) {
  Problem p = make_problem(test_seed());
  amp::GradScaler scaler;
  scaler.scale(loss_of(p));  // no autocast at all: no warning
  EXPECT_FALSE(scaler.warned_bfloat16());
  Tensor loss;
  {
    amp::Autocast autocast(Device::cpu(), kBFloat16);
    loss = loss_of(p);
  }
  scaler.scale(loss);
  EXPECT_TRUE(scaler.warned_bfloat16());
  amp::GradScaler later;  // built after that scope, and no autocast since: no warning
  later.scale(loss_of(p));
  EXPECT_FALSE(later.warned_bfloat16());
}

TEST(AmpGradScaler, DisabledScalerPassesThrough) {
  Problem p = make_problem(test_seed());
  amp::GradScaler scaler({.enabled = false});
  optim::SGD opt({p.w, p.b}, {.lr = 0.5});
  const Tensor loss = loss_of(p);
  EXPECT_TRUE(scaler.scale(loss).is_same(loss));
  loss.backward();
  const Tensor w_expected = p.w.detach() - p.w.grad() * 0.5;
  scaler.step(opt);
  EXPECT_FALSE(scaler.found_inf());
  scaler.update();
  EXPECT_TRUE(all_close(p.w, w_expected, 0.0, 0.0));
}

}  // namespace
}  // namespace nabla::testing
