// Learning-rate schedulers: closed forms of lr(step), and the state that resumes them.
#include "nabla/optim/scheduler.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "nabla/core/error.h"

namespace nabla::optim {

LRScheduler::LRScheduler(Optimizer& optimizer) : optimizer_(&optimizer) {
  for (const auto& group : optimizer.param_groups()) base_lrs_.push_back(*group.lr);
}

void LRScheduler::apply() {
  auto& groups = optimizer_->param_groups();
  for (size_t g = 0; g < groups.size(); ++g) groups[g].lr = lr_at(g, step_);
}

void LRScheduler::step() {
  ++step_;
  apply();
}

std::vector<double> LRScheduler::last_lr() const {
  std::vector<double> out;
  for (const auto& group : optimizer_->param_groups()) out.push_back(*group.lr);
  return out;
}

StateDict LRScheduler::state_dict() const {
  StateDict out;
  out["last_step"] = detail::scalar_tensor(static_cast<double>(step_));
  for (size_t g = 0; g < base_lrs_.size(); ++g)
    out["base_lrs." + std::to_string(g)] = detail::scalar_tensor(base_lrs_[g]);
  return out;
}

void LRScheduler::load_state_dict(const StateDict& state) {
  NABLA_CHECK(optimizer_->param_groups().size() == base_lrs_.size(),
              "scheduler load_state_dict: the optimizer has {} groups now, {} when the scheduler was built",
              optimizer_->param_groups().size(), base_lrs_.size());
  const int64_t step = detail::count_value(state, "last_step");
  std::vector<double> base_lrs(base_lrs_.size());
  for (size_t g = 0; g < base_lrs.size(); ++g) {
    const auto key = "base_lrs." + std::to_string(g);
    base_lrs[g] = detail::scalar_value(state, key);
    NABLA_CHECK(std::isfinite(base_lrs[g]) && base_lrs[g] >= 0,
                "scheduler load_state_dict: '{}' is {}; it must be finite and >= 0", key, base_lrs[g]);
  }
  step_ = step;
  base_lrs_ = std::move(base_lrs);
  apply();
}

StepLR::StepLR(Optimizer& optimizer, StepLROptions options) : LRScheduler(optimizer), options_(options) {
  NABLA_CHECK(options.step_size > 0, "StepLR: step_size must be > 0, got {}", options.step_size);
  apply();
}
double StepLR::lr_at(size_t group, int64_t step) const {
  return base_lrs()[group] * std::pow(options_.gamma, static_cast<double>(step / options_.step_size));
}

MultiStepLR::MultiStepLR(Optimizer& optimizer, MultiStepLROptions options)
    : LRScheduler(optimizer), options_(std::move(options)) {
  NABLA_CHECK(std::is_sorted(options_.milestones.begin(), options_.milestones.end()),
              "MultiStepLR: milestones must be increasing");
  apply();
}
double MultiStepLR::lr_at(size_t group, int64_t step) const {
  const auto passed = std::upper_bound(options_.milestones.begin(), options_.milestones.end(), step) -
                      options_.milestones.begin();
  return base_lrs()[group] * std::pow(options_.gamma, static_cast<double>(passed));
}

ExponentialLR::ExponentialLR(Optimizer& optimizer, ExponentialLROptions options)
    : LRScheduler(optimizer), options_(options) {
  apply();
}
double ExponentialLR::lr_at(size_t group, int64_t step) const {
  return base_lrs()[group] * std::pow(options_.gamma, static_cast<double>(step));
}

CosineLR::CosineLR(Optimizer& optimizer, CosineLROptions options)
    : LRScheduler(optimizer), options_(options) {
  NABLA_CHECK(
      options.total_steps > 0 && options.warmup_steps >= 0 && options.warmup_steps < options.total_steps,
      "CosineLR: needs 0 <= warmup_steps < total_steps, got warmup_steps {} and total_steps {}",
      options.warmup_steps, options.total_steps);
  apply();
}
double CosineLR::lr_at(size_t group, int64_t step) const {
  const double base = base_lrs()[group];
  if (step < options_.warmup_steps) {
    return base * static_cast<double>(step + 1) / static_cast<double>(options_.warmup_steps);
  }
  const double t = static_cast<double>(std::min(step, options_.total_steps) - options_.warmup_steps);
  const double span = static_cast<double>(options_.total_steps - options_.warmup_steps);
  return options_.min_lr + (base - options_.min_lr) * (1.0 + std::cos(std::numbers::pi * t / span)) / 2.0;
}

PolynomialLR::PolynomialLR(Optimizer& optimizer, PolynomialLROptions options)
    : LRScheduler(optimizer), options_(options) {
  NABLA_CHECK(options.total_steps > 0, "PolynomialLR: total_steps must be > 0, got {}", options.total_steps);
  apply();
}
double PolynomialLR::lr_at(size_t group, int64_t step) const {
  const double t = static_cast<double>(std::min(step, options_.total_steps));
  return base_lrs()[group] * std::pow(1.0 - t / static_cast<double>(options_.total_steps), options_.power);
}

OneCycleLR::OneCycleLR(Optimizer& optimizer, OneCycleLROptions options)
    : LRScheduler(optimizer), options_(options) {
  NABLA_CHECK(options.total_steps > 1, "OneCycleLR: total_steps must be > 1, got {}", options.total_steps);
  NABLA_CHECK(options.pct_start > 0.0 && options.pct_start < 1.0,
              "OneCycleLR: pct_start must be in (0, 1), got {}", options.pct_start);
  apply();
}
double OneCycleLR::lr_at(size_t group, int64_t step) const {
  const double max_lr = options_.max_lr.value_or(base_lrs()[group]);
  const double initial = max_lr / options_.div_factor;
  const double min_lr = initial / options_.final_div_factor;
  const double phase1_end = options_.pct_start * static_cast<double>(options_.total_steps) - 1.0;
  const double phase2_end = static_cast<double>(options_.total_steps) - 1.0;
  const auto anneal = [](double start, double end, double pct) {
    return end + (start - end) / 2.0 * (std::cos(std::numbers::pi * pct) + 1.0);
  };
  const auto t = static_cast<double>(std::min(step, options_.total_steps - 1));
  if (t <= phase1_end) return anneal(initial, max_lr, t / phase1_end);
  return anneal(max_lr, min_lr, (t - phase1_end) / (phase2_end - phase1_end));
}

namespace {
Optimizer& optimizer_of(const std::unique_ptr<LRScheduler>& scheduler) {
  NABLA_CHECK(scheduler != nullptr, "LinearWarmup: needs a scheduler to warm up into");
  return scheduler->optimizer();
}
}  // namespace

LinearWarmup::LinearWarmup(std::unique_ptr<LRScheduler> after, LinearWarmupOptions options)
    : LRScheduler(optimizer_of(after)), after_(std::move(after)), options_(options) {
  // The wrapped scheduler already set its lr(0); the base lrs are the ones it started from.
  base_lrs_ = after_->base_lrs();
  NABLA_CHECK(options.warmup_steps >= 0, "LinearWarmup: warmup_steps must be >= 0, got {}",
              options.warmup_steps);
  NABLA_CHECK(options.start_factor >= 0.0 && options.start_factor <= 1.0,
              "LinearWarmup: start_factor must be in [0, 1], got {}", options.start_factor);
  apply();
}
double LinearWarmup::lr_at(size_t group, int64_t step) const {
  if (step < options_.warmup_steps) {
    const double factor = options_.start_factor + (1.0 - options_.start_factor) * static_cast<double>(step) /
                                                      static_cast<double>(options_.warmup_steps);
    return base_lrs()[group] * factor;
  }
  return after_->lr_at(group, step - options_.warmup_steps);
}

void LinearWarmup::load_state_dict(const StateDict& state) {
  after_->load_state_dict(state);  // the same base lrs; its own step is unused
  LRScheduler::load_state_dict(state);
}

}  // namespace nabla::optim
