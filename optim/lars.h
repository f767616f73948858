// Public header. LARS as in the MLPerf ResNet-50 reference: per tensor, the learning rate is
// scaled by the trust ratio eta * ||w|| / (||g|| + weight_decay * ||w||) (1 where either norm
// is 0), weight decay is added to the gradient, and heavy-ball momentum accumulates the scaled
// step (v = momentum * v + lr * trust * (g + wd * w); w -= v). Groups with skip_adaptation
// (BN and bias, see param_groups) get neither the trust ratio nor weight decay. The norms
// stay on the device: a step never synchronizes with the host.
#pragma once

#include "nabla/optim/optimizer.h"

namespace nabla::optim {

struct LarsOptions {
  double lr = 0.1;
  double momentum = 0.9;
  double weight_decay = 0.0;
  double eta = 0.001;  // the trust coefficient
  bool nesterov = false;
};

class LARS : public Optimizer {
 public:
  LARS(std::vector<ParamGroup> groups, LarsOptions options);
  LARS(TensorList params, LarsOptions options);
  void step() override;
  const LarsOptions& options() const { return options_; }

 private:
  LarsOptions options_;
};

}  // namespace nabla::optim
