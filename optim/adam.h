// Public header. Adam (L2 weight decay added to the gradient) and AdamW (decoupled weight
// decay), exactly as torch.optim.Adam/AdamW: bias correction, eps outside the square root,
// optional amsgrad. Momentum in a ParamGroup is unused.
//
//   auto opt = nb::optim::AdamW(params, {.lr = 1e-3, .weight_decay = 0.05});
#pragma once

#include "nabla/optim/optimizer.h"

namespace nabla::optim {

struct AdamOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
  bool amsgrad = false;
};

struct AdamWOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 1e-2;
  bool amsgrad = false;
};

class Adam : public Optimizer {
 public:
  Adam(std::vector<ParamGroup> groups, AdamOptions options);
  Adam(TensorList params, AdamOptions options);
  void step() override;
  // On the device when every gradient takes the fused CUDA update (float32, dense, the
  // parameter's layout, on found_inf's device): a skipped step changes no state, step counts included.
  bool step_unless(const Tensor& found_inf) override;
  const AdamOptions& options() const { return options_; }

 protected:
  Adam(std::vector<ParamGroup> groups, AdamOptions options, bool decoupled, const char* name);
  std::vector<std::string> required_state() const override;

 private:
  void update(const Tensor& skip_if);
  AdamOptions options_;
  bool decoupled_weight_decay_ = false;
};

class AdamW : public Adam {
 public:
  AdamW(std::vector<ParamGroup> groups, AdamWOptions options);
  AdamW(TensorList params, AdamWOptions options);
};

}  // namespace nabla::optim
