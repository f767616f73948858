// Public header. Learning-rate schedulers. Each is a closed-form curve lr(step) per parameter
// group, starting from the group's lr when the scheduler is built (its base lr), so a resumed
// scheduler continues exactly the same curve. Construction sets lr(0); step() advances one
// step (call it after opt.step(), once per iteration or per epoch as you define the units).
//
//   auto sched = nb::optim::CosineLR(opt, {.total_steps = 90 * n, .warmup_steps = 5 * n});
//   auto sched = nb::optim::LinearWarmup(std::make_unique<nb::optim::StepLR>(opt, {.step_size = 30}),
//                                        {.warmup_steps = 500});
#pragma once

#include <memory>
#include <vector>

#include "nabla/optim/optimizer.h"

namespace nabla::optim {

class LRScheduler {
 public:
  explicit LRScheduler(Optimizer& optimizer);
  virtual ~LRScheduler() = default;
  LRScheduler(const LRScheduler&) = delete;
  LRScheduler& operator=(const LRScheduler&) = delete;

  void step();
  int64_t last_step() const { return step_; }
  // The lr of group `group` at `step` (pure; does not touch the optimizer).
  virtual double lr_at(size_t group, int64_t step) const = 0;
  std::vector<double> last_lr() const;
  Optimizer& optimizer() const { return *optimizer_; }
  const std::vector<double>& base_lrs() const { return base_lrs_; }

  // Keys: "last_step", "base_lrs.<g>".
  StateDict state_dict() const;
  virtual void load_state_dict(const StateDict& state);

 protected:
  void apply();  // writes lr_at(g, step_) into every group

  std::vector<double> base_lrs_;

 private:
  Optimizer* optimizer_;
  int64_t step_ = 0;
};

// lr = base * gamma^floor(step / step_size)
struct StepLROptions {
  int64_t step_size = 1;
  double gamma = 0.1;
};
class StepLR : public LRScheduler {
 public:
  StepLR(Optimizer& optimizer, StepLROptions options);
  double lr_at(size_t group, int64_t step) const override;

 private:
  StepLROptions options_;
};

// lr = base * gamma^(number of milestones <= step)
struct MultiStepLROptions {
  std::vector<int64_t> milestones = {};
  double gamma = 0.1;
};
class MultiStepLR : public LRScheduler {
 public:
  MultiStepLR(Optimizer& optimizer, MultiStepLROptions options);
  double lr_at(size_t group, int64_t step) const override;

 private:
  MultiStepLROptions options_;
};

// lr = base * gamma^step
struct ExponentialLROptions {
  double gamma = 0.99;
};
class ExponentialLR : public LRScheduler {
 public:
  ExponentialLR(Optimizer& optimizer, ExponentialLROptions options);
  double lr_at(size_t group, int64_t step) const override;

 private:
  ExponentialLROptions options_;
};

// Linear warmup base * (step + 1) / warmup_steps for step < warmup_steps, then cosine
// annealing (PyTorch's CosineAnnealingLR closed form) from base to min_lr over the remaining
// total_steps - warmup_steps steps; min_lr after total_steps.
struct CosineLROptions {
  int64_t total_steps = 0;
  int64_t warmup_steps = 0;
  double min_lr = 0.0;
};
class CosineLR : public LRScheduler {
 public:
  CosineLR(Optimizer& optimizer, CosineLROptions options);
  double lr_at(size_t group, int64_t step) const override;

 private:
  CosineLROptions options_;
};

// lr = base * (1 - min(step, total_steps) / total_steps)^power   (PyTorch's PolynomialLR)
struct PolynomialLROptions {
  int64_t total_steps = 0;
  double power = 1.0;
};
class PolynomialLR : public LRScheduler {
 public:
  PolynomialLR(Optimizer& optimizer, PolynomialLROptions options);
  double lr_at(size_t group, int64_t step) const override;

 private:
  PolynomialLROptions options_;
};

// PyTorch's OneCycleLR with cosine annealing (two phases): from max_lr / div_factor up to
// max_lr over pct_start * total_steps - 1 steps, then down to initial / final_div_factor at
// step total_steps - 1. max_lr unset: each group's lr is its max_lr.
struct OneCycleLROptions {
  int64_t total_steps = 0;
  std::optional<double> max_lr = std::nullopt;
  double pct_start = 0.3;
  double div_factor = 25.0;
  double final_div_factor = 1e4;
};
class OneCycleLR : public LRScheduler {
 public:
  OneCycleLR(Optimizer& optimizer, OneCycleLROptions options);
  double lr_at(size_t group, int64_t step) const override;

 private:
  OneCycleLROptions options_;
};

// Linear warmup in front of any scheduler: base * (start_factor + (1 - start_factor) * step /
// warmup_steps) for step < warmup_steps, then the wrapped scheduler's lr_at(step - warmup_steps).
struct LinearWarmupOptions {
  int64_t warmup_steps = 0;
  double start_factor = 0.0;
};
class LinearWarmup : public LRScheduler {
 public:
  LinearWarmup(std::unique_ptr<LRScheduler> after, LinearWarmupOptions options);
  double lr_at(size_t group, int64_t step) const override;
  void load_state_dict(const StateDict& state) override;

 private:
  std::unique_ptr<LRScheduler> after_;
  LinearWarmupOptions options_;
};

}  // namespace nabla::optim
