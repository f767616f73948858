// Scheduler curves against closed forms written out here (PyTorch's documented formulas),
// and resumes that continue the same curve.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <numbers>

#include "test_util.h"

namespace nabla::testing {
namespace {

constexpr double kPi = std::numbers::pi;

// Two groups with different base lrs.
struct TwoGroups {
  TensorList params;
  std::unique_ptr<optim::SGD> opt;
  explicit TwoGroups(uint64_t seed, double lr0 = 0.1, double lr1 = 0.4) {
    params = {random_input({2}, seed, kFloat64, true), random_input({3}, seed + 1, kFloat64, true)};
    std::vector<optim::ParamGroup> groups(2);
    groups[0].params = {params[0]};
    groups[1].params = {params[1]};
    groups[1].lr = lr1;
    opt = std::make_unique<optim::SGD>(groups, optim::SgdOptions{.lr = lr0});
  }
};

// Checks lr at steps 0..n-1 (step 0 right after construction) against expected(base, step).
void expect_curve(optim::LRScheduler& sched, int n, const std::function<double(double, int)>& expected,
                  std::vector<double> bases = {0.1, 0.4}) {
  for (int s = 0; s < n; ++s) {
    for (size_t g = 0; g < bases.size(); ++g) {
      EXPECT_NEAR(*sched.optimizer().param_groups()[g].lr, expected(bases[g], s), 1e-12)
          << "group " << g << " step " << s;
    }
    sched.step();
  }
}

TEST(OptimScheduler, StepLR) {
  TwoGroups setup(test_seed());
  optim::StepLR sched(*setup.opt, {.step_size = 3, .gamma = 0.5});
  expect_curve(sched, 10, [](double b, int s) { return b * std::pow(0.5, s / 3); });
}

TEST(OptimScheduler, MultiStepLR) {
  TwoGroups setup(test_seed());
  optim::MultiStepLR sched(*setup.opt, {.milestones = {2, 5, 6}, .gamma = 0.1});
  expect_curve(sched, 9, [](double b, int s) { return b * std::pow(0.1, (s >= 2) + (s >= 5) + (s >= 6)); });
}

TEST(OptimScheduler, ExponentialLR) {
  TwoGroups setup(test_seed());
  optim::ExponentialLR sched(*setup.opt, {.gamma = 0.9});
  expect_curve(sched, 8, [](double b, int s) { return b * std::pow(0.9, s); });
}

TEST(OptimScheduler, CosineMatchesCosineAnnealing) {
  TwoGroups setup(test_seed());
  // Without warmup: PyTorch's CosineAnnealingLR, eta_min + (base - eta_min)(1 + cos(pi t / T)) / 2.
  optim::CosineLR sched(*setup.opt, {.total_steps = 10, .min_lr = 0.01});
  expect_curve(sched, 13, [](double b, int s) {
    const int t = std::min(s, 10);
    return 0.01 + (b - 0.01) * (1 + std::cos(kPi * t / 10)) / 2;
  });
}

TEST(OptimScheduler, CosineWithWarmup) {
  TwoGroups setup(test_seed());
  optim::CosineLR sched(*setup.opt, {.total_steps = 12, .warmup_steps = 4});
  expect_curve(sched, 14, [](double b, int s) {
    if (s < 4) return b * (s + 1) / 4.0;
    return b * (1 + std::cos(kPi * (std::min(s, 12) - 4) / 8.0)) / 2;
  });
}

TEST(OptimScheduler, PolynomialLR) {
  TwoGroups setup(test_seed());
  optim::PolynomialLR sched(*setup.opt, {.total_steps = 6, .power = 2.0});
  expect_curve(sched, 9, [](double b, int s) { return b * std::pow(1.0 - std::min(s, 6) / 6.0, 2.0); });
}

TEST(OptimScheduler, OneCycleMatchesPyTorchFormula) {
  TwoGroups setup(test_seed());
  optim::OneCycleLR sched(
      *setup.opt,
      {.total_steps = 20, .max_lr = 1.0, .pct_start = 0.25, .div_factor = 10.0, .final_div_factor = 100.0});
  // torch.optim.lr_scheduler.OneCycleLR, anneal_strategy='cos', three_phase=False.
  const auto expected = [](double, int s) {
    const double initial = 1.0 / 10.0, min_lr = initial / 100.0;
    const double end1 = 0.25 * 20 - 1, end2 = 19;
    const auto cos_anneal = [](double a, double b, double pct) {
      return b + (a - b) / 2.0 * (std::cos(kPi * pct) + 1);
    };
    if (s <= end1) return cos_anneal(initial, 1.0, s / end1);
    return cos_anneal(1.0, min_lr, (s - end1) / (end2 - end1));
  };
  expect_curve(sched, 20, expected, {1.0, 1.0});
  EXPECT_NEAR(*setup.opt->param_groups()[0].lr, 1e-3, 1e-12);  // stays at the end
}

TEST(OptimScheduler, OneCycleDefaultsToGroupLrAsMax) {
  TwoGroups setup(test_seed());
  optim::OneCycleLR sched(*setup.opt, {.total_steps = 10});
  EXPECT_NEAR(*setup.opt->param_groups()[1].lr, 0.4 / 25.0, 1e-12);
  sched.step();  // phase 1 ends at step 0.3 * 10 - 1 = 2
  EXPECT_LT(*setup.opt->param_groups()[1].lr, 0.4);
  sched.step();
  EXPECT_NEAR(*setup.opt->param_groups()[1].lr, 0.4, 1e-12);
}

TEST(OptimScheduler, LinearWarmupComposesWithStepLR) {
  TwoGroups setup(test_seed());
  optim::LinearWarmup sched(
      std::make_unique<optim::StepLR>(*setup.opt, optim::StepLROptions{.step_size = 2, .gamma = 0.5}),
      {.warmup_steps = 3, .start_factor = 0.1});
  expect_curve(sched, 10, [](double b, int s) {
    if (s < 3) return b * (0.1 + 0.9 * s / 3.0);
    return b * std::pow(0.5, (s - 3) / 2);
  });
}

TEST(OptimScheduler, Errors) {
  TwoGroups setup(test_seed());
  EXPECT_NABLA_ERROR(optim::CosineLR(*setup.opt, {.total_steps = 5, .warmup_steps = 5}), "warmup_steps");
  EXPECT_NABLA_ERROR(optim::StepLR(*setup.opt, {.step_size = 0}), "step_size");
  EXPECT_NABLA_ERROR(optim::LinearWarmup(nullptr, {.warmup_steps = 2}), "LinearWarmup");
}

// Runs `make` for n steps straight, and for k steps, saves optimizer + scheduler, builds both
// fresh, loads, and continues: the lr sequences agree exactly.
void check_resume(const std::function<std::unique_ptr<optim::LRScheduler>(optim::Optimizer&)>& make,
                  uint64_t seed) {
  const int k = 4, n = 12;
  std::vector<double> straight, resumed;
  {
    TwoGroups setup(seed);
    auto sched = make(*setup.opt);
    for (int s = 0; s < n; ++s) {
      straight.push_back(*setup.opt->param_groups()[1].lr);
      sched->step();
    }
  }
  optim::StateDict opt_state, sched_state;
  {
    TwoGroups setup(seed);
    auto sched = make(*setup.opt);
    for (int s = 0; s < k; ++s) {
      resumed.push_back(*setup.opt->param_groups()[1].lr);
      sched->step();
    }
    opt_state = setup.opt->state_dict();
    sched_state = sched->state_dict();
  }
  TwoGroups setup(seed);
  setup.opt->load_state_dict(opt_state);  // the optimizer now holds the scheduled lrs
  auto sched = make(*setup.opt);
  sched->load_state_dict(sched_state);
  EXPECT_EQ(sched->last_step(), k);
  for (int s = k; s < n; ++s) {
    resumed.push_back(*setup.opt->param_groups()[1].lr);
    sched->step();
  }
  ASSERT_EQ(resumed.size(), straight.size());
  for (int s = 0; s < n; ++s) EXPECT_DOUBLE_EQ(resumed[s], straight[s]) << "step " << s;
}

TEST(OptimScheduler, ResumeContinuesTheSameCurve) {
  const uint64_t seed = test_seed();
  check_resume(
      [](optim::Optimizer& o) {
        return std::make_unique<optim::CosineLR>(
            o, optim::CosineLROptions{.total_steps = 12, .warmup_steps = 3});
      },
      seed);
  check_resume(
      [](optim::Optimizer& o) {
        return std::make_unique<optim::OneCycleLR>(o, optim::OneCycleLROptions{.total_steps = 12});
      },
      seed);
  check_resume(
      [](optim::Optimizer& o) {
        return std::make_unique<optim::MultiStepLR>(o, optim::MultiStepLROptions{.milestones = {3, 7}});
      },
      seed);
  check_resume(
      [](optim::Optimizer& o) {
        return std::make_unique<optim::PolynomialLR>(o, optim::PolynomialLROptions{.total_steps = 10});
      },
      seed);
  check_resume(
      [](optim::Optimizer& o) {
        return std::make_unique<optim::LinearWarmup>(
            std::make_unique<optim::ExponentialLR>(o, optim::ExponentialLROptions{.gamma = 0.8}),
            optim::LinearWarmupOptions{.warmup_steps = 5});
      },
      seed);
}

}  // namespace
}  // namespace nabla::testing
