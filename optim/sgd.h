// Public header. SGD with momentum, dampening, nesterov and (L2) weight decay, exactly as
// torch.optim.SGD: the first momentum buffer is the gradient itself.
//
//   auto opt = nb::optim::SGD(params, {.lr = 0.1, .momentum = 0.9, .nesterov = true});
#pragma once

#include "nabla/optim/optimizer.h"

namespace nabla::optim {

struct SgdOptions {
  double lr = 0.01;
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;
};

class SGD : public Optimizer {
 public:
  SGD(std::vector<ParamGroup> groups, SgdOptions options);
  SGD(TensorList params, SgdOptions options);
  void step() override;
  // On the device when every gradient takes the fused CUDA update (float32, dense, the
  // parameter's layout, on found_inf's device) and dampening is 0.
  bool step_unless(const Tensor& found_inf) override;
  const SgdOptions& options() const { return options_; }

 private:
  void update(const Tensor& skip_if);
  SgdOptions options_;
};

}  // namespace nabla::optim
