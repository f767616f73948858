// Public header. An exponential moving average of weights: shadow = decay * shadow +
// (1 - decay) * param after each update(). For evaluation, store() the live weights, copy_to()
// the averages into the parameters, and restore() afterwards.
//
//   auto ema = nb::optim::ExponentialMovingAverage(params, {.decay = 0.999});
//   ... opt.step(); ema.update(); ...
//   ema.store(); ema.copy_to(); evaluate(); ema.restore();
#pragma once

#include "nabla/optim/optimizer.h"

namespace nabla::optim {

struct EmaOptions {
  double decay = 0.999;
};

class ExponentialMovingAverage {
 public:
  ExponentialMovingAverage(TensorList params, EmaOptions options = {});

  void update();
  void store();    // saves the current parameter values
  void copy_to();  // parameters <- averages
  void restore();  // parameters <- the values saved by store()

  const TensorList& shadow() const { return shadow_; }
  int64_t num_updates() const { return num_updates_; }
  // Keys: "shadow.<i>", "num_updates".
  StateDict state_dict() const;
  void load_state_dict(const StateDict& state);

 private:
  TensorList params_;
  TensorList shadow_;
  TensorList backup_;
  EmaOptions options_;
  int64_t num_updates_ = 0;
};

}  // namespace nabla::optim
