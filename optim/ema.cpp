// The exponential moving average of weights, updated in place under NoGradGuard.
#include "nabla/optim/ema.h"

#include "nabla/core/autograd/grad_mode.h"
#include "nabla/core/error.h"

namespace nabla::optim {

ExponentialMovingAverage::ExponentialMovingAverage(TensorList params, EmaOptions options)
    : params_(std::move(params)), options_(options) {
  NABLA_CHECK(options.decay >= 0.0 && options.decay <= 1.0,
              "ExponentialMovingAverage: decay must be in [0, 1], got {}", options.decay);
  NoGradGuard no_grad;
  for (const auto& p : params_) shadow_.push_back(p.detach().clone());
}

void ExponentialMovingAverage::update() {
  NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i)
    shadow_[i].mul_(options_.decay).add_(params_[i], 1.0 - options_.decay);
  ++num_updates_;
}

void ExponentialMovingAverage::store() {
  NoGradGuard no_grad;
  backup_.clear();
  for (const auto& p : params_) backup_.push_back(p.detach().clone());
}

void ExponentialMovingAverage::copy_to() {
  NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) params_[i].copy_(shadow_[i]);
}

void ExponentialMovingAverage::restore() {
  NABLA_CHECK(backup_.size() == params_.size(), "ExponentialMovingAverage::restore: call store() first");
  NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) params_[i].copy_(backup_[i]);
  backup_.clear();
}

StateDict ExponentialMovingAverage::state_dict() const {
  StateDict out;
  out["num_updates"] = detail::scalar_tensor(static_cast<double>(num_updates_));
  for (size_t i = 0; i < shadow_.size(); ++i) out["shadow." + std::to_string(i)] = shadow_[i].clone();
  return out;
}

void ExponentialMovingAverage::load_state_dict(const StateDict& state) {
  NoGradGuard no_grad;
  // Checked whole before anything changes, so a file that fails leaves the averages as they were.
  const int64_t updates = detail::count_value(state, "num_updates");
  for (size_t i = 0; i < shadow_.size(); ++i) {
    const auto key = "shadow." + std::to_string(i);
    auto it = state.find(key);
    NABLA_CHECK(it != state.end(), "ExponentialMovingAverage::load_state_dict: missing key '{}'", key);
    NABLA_CHECK(it->second.sizes() == shadow_[i].sizes(),
                "ExponentialMovingAverage::load_state_dict: '{}' has shape {}, want {}", key,
                shape_str(it->second.sizes()), shape_str(shadow_[i].sizes()));
  }
  num_updates_ = updates;
  for (size_t i = 0; i < shadow_.size(); ++i) shadow_[i].copy_(state.at("shadow." + std::to_string(i)));
}

}  // namespace nabla::optim
