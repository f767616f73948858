// GradScaler (see amp/grad_scaler.h). The scale lives on the host: scale() multiplies by a host
// number, and the kernels take 1/scale as an argument, so only the found-inf flag ever crosses
// from the device, once per step. Per-optimizer bookkeeping (unscaled? stepped? its flags)
// lives until update(), as in PyTorch, so one scaler can drive several optimizers.
#include "nabla/amp/grad_scaler.h"

#include <cmath>
#include <limits>

#include "nabla/amp/cuda/unscale.h"
#include "nabla/core/autocast.h"
#include "nabla/core/autograd/grad_mode.h"
#include "nabla/core/logging.h"
#include "nabla/ops/ops.h"

namespace nabla::amp {

namespace {

void check_options(const GradScalerOptions& o) {
  NABLA_CHECK(std::isfinite(o.init_scale) && o.init_scale > 0,
              "GradScaler: init_scale must be a finite positive number, got {}", o.init_scale);
  NABLA_CHECK(std::isfinite(o.growth_factor) && o.growth_factor > 1.0,
              "GradScaler: growth_factor must be > 1, got {}", o.growth_factor);
  NABLA_CHECK(o.backoff_factor > 0.0 && o.backoff_factor < 1.0,
              "GradScaler: backoff_factor must be in (0, 1), got {}", o.backoff_factor);
  NABLA_CHECK(o.growth_interval >= 1, "GradScaler: growth_interval must be >= 1, got {}", o.growth_interval);
}

// The flag for `device` in `flags` (one per device), created zero on first use.
Tensor& flag_for(TensorList& flags, Device device) {
  for (auto& f : flags) {
    if (f.device() == device) return f;
  }
  flags.push_back(zeros({1}, {.dtype = kFloat32, .device = device}));
  return flags.back();
}

double state_value(const std::map<std::string, Tensor>& state, const std::string& key) {
  auto it = state.find(key);
  NABLA_CHECK(it != state.end(),
              "GradScaler::load_state_dict: missing key '{}' (expected scale, growth_factor, "
              "backoff_factor, growth_interval, growth_tracker, dynamic, enabled)",
              key);
  NABLA_CHECK(it->second.numel() == 1, "GradScaler::load_state_dict: '{}' must hold one value, got {}", key,
              describe(it->second));
  return it->second.to(Device::cpu(), kFloat64).item<double>();
}

}  // namespace

GradScaler::GradScaler(GradScalerOptions options)
    : options_(options),
      scale_(options.init_scale),
      scopes_at_construction_(autocast::enabled_scope_count()) {
  check_options(options_);
}

Tensor GradScaler::scale(const Tensor& loss) {
  if (!options_.enabled) return loss;
  NABLA_CHECK(loss.defined() && loss.is_floating_point(),
              "GradScaler::scale: expected a floating-point loss, got {}",
              loss.defined() ? describe(loss) : std::string("an undefined tensor"));
  // Warn when the last autocast scope entered on this thread since the scaler was built ran in
  // bfloat16 (typically the one that computed this loss).
  if (!warned_bfloat16_ && autocast::enabled_scope_count() > scopes_at_construction_ &&
      autocast::last_enabled_dtype() == kBFloat16) {
    warned_bfloat16_ = true;
    NABLA_LOG_WARN(
        "GradScaler: autocast ran in bfloat16, which has float32's exponent range, so loss scaling is not "
        "needed; build the scaler with {.enabled = false} (or drop it) to save the unscale pass");
  }
  return loss * scale_;
}

void GradScaler::unscale_(optim::Optimizer& optimizer) {
  if (!options_.enabled) return;
  PerOptimizer& state = per_optimizer_[&optimizer];
  NABLA_CHECK(!state.unscaled,
              "GradScaler::unscale_: already called for this optimizer since the last update()");
  NABLA_CHECK(!state.stepped,
              "GradScaler::unscale_: called after step(); call it before step(), once per update()");
  NoGradGuard no_grad;
  const double inv_scale = 1.0 / scale_;
  std::map<int, TensorList> fused;  // CUDA device index -> float32 dense gradients
  for (const auto& group : optimizer.param_groups()) {
    for (const Tensor& param : group.params) {
      if (!param.grad().defined()) continue;
      Tensor grad = param.grad();
      Tensor& flag = flag_for(state.found_inf, grad.device());
      if (cuda::unscale_eligible(grad)) {
        fused[grad.device().index].push_back(grad);
        continue;
      }
      // Any other gradient: scale in place, and add sum(g * 0) to the flag, which is NaN exactly
      // when some element is inf or NaN (inf * 0 = NaN) and 0 otherwise. Stays on the device.
      grad.mul_(inv_scale);
      flag = flag + sum(grad * 0.0);
    }
  }
  for (auto& [index, grads] : fused) {
    cuda::multi_tensor_unscale(grads, inv_scale, flag_for(state.found_inf, Device::cuda(index)));
  }
  state.unscaled = true;
}

bool GradScaler::read_found_inf(PerOptimizer& state) const {
  if (!state.found_inf_read) {
    state.found = false;
    for (Tensor& flag : state.found_inf) {
      if (options_.reduce_found_inf) options_.reduce_found_inf(flag);  // agree across ranks first
      const float v = flag.item<float>();  // the step's one device-to-host read (per device)
      state.found = state.found || v != 0.0f || std::isnan(v);
    }
    state.found_inf_read = true;
  }
  return state.found;
}

bool GradScaler::step(optim::Optimizer& optimizer) {
  if (!options_.enabled) {
    optimizer.step();
    return true;
  }
  PerOptimizer& state = per_optimizer_[&optimizer];
  NABLA_CHECK(!state.stepped, "GradScaler::step: already called for this optimizer since the last update()");
  if (!state.unscaled) unscale_(optimizer);
  state.stepped = true;
  if (read_found_inf(state)) return false;
  optimizer.step();
  return true;
}

void GradScaler::update() {
  if (!options_.enabled) return;
  NABLA_CHECK(!per_optimizer_.empty(),
              "GradScaler::update: no step() or unscale_() since the last update(), so there is no inf/NaN "
              "check to update from");
  bool found = false;
  for (auto& [optimizer, state] : per_optimizer_) found = read_found_inf(state) || found;
  per_optimizer_.clear();
  if (!options_.dynamic) return;
  if (found) {
    scale_ *= options_.backoff_factor;
    growth_tracker_ = 0;
    return;
  }
  if (++growth_tracker_ == options_.growth_interval) {
    // Stay finite: a float32 loss times an infinite scale would overflow every step.
    const double grown = scale_ * options_.growth_factor;
    if (std::isfinite(static_cast<float>(grown))) scale_ = grown;
    growth_tracker_ = 0;
  }
}

std::vector<Overflow> GradScaler::overflowed_parameters(
    const optim::Optimizer& optimizer,
    const std::vector<std::pair<std::string, Tensor>>& named_parameters) const {
  NoGradGuard no_grad;
  std::vector<Overflow> out;
  const auto& groups = optimizer.param_groups();
  for (size_t g = 0; g < groups.size(); ++g) {
    for (size_t i = 0; i < groups[g].params.size(); ++i) {
      const Tensor& param = groups[g].params[i];
      const Tensor& grad = param.grad();
      if (!grad.defined()) continue;
      const Tensor nan = ne(grad, grad);
      const Tensor inf = eq(abs(grad), std::numeric_limits<double>::infinity());
      const auto count = static_cast<int64_t>(sum(nan).item<double>() + sum(inf).item<double>());
      if (count == 0) continue;
      Overflow o{.group = g, .index = i, .name = {}, .shape = param.sizes(), .nonfinite = count};
      for (const auto& [name, t] : named_parameters) {
        if (t.is_same(param)) o.name = name;
      }
      out.push_back(std::move(o));
    }
  }
  return out;
}

std::map<std::string, Tensor> GradScaler::state_dict() const {
  auto scalar = [](double v) { return full({}, v, {.dtype = kFloat64}); };
  return {{"scale", scalar(scale_)},
          {"growth_factor", scalar(options_.growth_factor)},
          {"backoff_factor", scalar(options_.backoff_factor)},
          {"growth_interval", scalar(static_cast<double>(options_.growth_interval))},
          {"growth_tracker", scalar(static_cast<double>(growth_tracker_))},
          {"dynamic", scalar(options_.dynamic ? 1.0 : 0.0)},
          {"enabled", scalar(options_.enabled ? 1.0 : 0.0)}};
}

void GradScaler::load_state_dict(const std::map<std::string, Tensor>& state) {
  GradScalerOptions o = options_;
  o.init_scale = state_value(state, "scale");
  o.growth_factor = state_value(state, "growth_factor");
  o.backoff_factor = state_value(state, "backoff_factor");
  o.growth_interval = static_cast<int64_t>(state_value(state, "growth_interval"));
  o.dynamic = state_value(state, "dynamic") != 0.0;
  o.enabled = state_value(state, "enabled") != 0.0;
  const double tracker = state_value(state, "growth_tracker");
  check_options(o);
  NABLA_CHECK(tracker >= 0 && tracker < static_cast<double>(o.growth_interval),
              "GradScaler::load_state_dict: growth_tracker must be in [0, growth_interval = {}), got {}",
              o.growth_interval, tracker);
  options_ = o;
  scale_ = o.init_scale;
  growth_tracker_ = static_cast<int64_t>(tracker);
  per_optimizer_.clear();
}

}  // namespace nabla::amp
