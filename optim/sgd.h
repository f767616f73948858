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
  const SgdOptions& options() const { return options_; }

 private:
  SgdOptions options_;
};

}  // namespace nabla::optim
