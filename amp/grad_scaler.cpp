// GradScaler (see amp/grad_scaler.h). The scale, its growth counter and the found-inf flags are
// device tensors, so a training step never waits for the GPU: the unscale kernel reads 1/scale
// from device memory, the optimizer skips on the device where it can, and update() is a handful
// of 0-d device ops. Per-optimizer bookkeeping (unscaled? stepped? its flags) lives until
// update(), as in PyTorch, so one scaler can drive several optimizers.
#include "nabla/amp/grad_scaler.h"

#include <cmath>
#include <limits>

#include "nabla/amp/cuda/unscale.h"
#include "nabla/core/autocast.h"
#include "nabla/core/autograd/grad_mode.h"
#include "nabla/core/dispatch.h"
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

// A found-inf flag value is set when nonzero, NaN included.
bool is_set(float flag) {
  return flag != 0.0f || std::isnan(flag);
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
    : options_(std::move(options)), scopes_at_construction_(autocast::enabled_scope_count()) {
  check_options(options_);
}

void GradScaler::ensure_scale(Device device) {
  if (!scale_.defined()) {
    scale_ = full({}, options_.init_scale, {.dtype = kFloat32, .device = device});
    tracker_ = full({}, initial_tracker_, {.dtype = kFloat32, .device = device});
  } else if (scale_.device() != device) {
    scale_ = scale_.to(device);  // losses moved to another device: the scale follows
    tracker_ = tracker_.to(device);
  }
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
  ensure_scale(loss.device());
  // A 16-bit loss is scaled in float32: 65536 itself overflows float16.
  if (loss.dtype() == kFloat64) return loss * scale_.to(kFloat64);
  return (loss.dtype() == kFloat32 ? loss : loss.to(kFloat32)) * scale_;
}

void GradScaler::unscale_(optim::Optimizer& optimizer) {
  if (!options_.enabled) return;
  PerOptimizer& state = per_optimizer_[&optimizer];
  NABLA_CHECK(!state.unscaled,
              "GradScaler::unscale_: already called for this optimizer since the last update()");
  NABLA_CHECK(!state.stepped,
              "GradScaler::unscale_: called after step(); call it before step(), once per update()");
  NoGradGuard no_grad;
  std::map<int, TensorList> fused;  // CUDA device index -> float32 dense gradients
  TensorList inv_scale;             // 1 / scale, float32, one per gradient device
  auto inv_on = [&](Device device) -> Tensor {
    for (const Tensor& t : inv_scale) {
      if (t.device() == device) return t;
    }
    // Before any scale(): unscaling by the initial scale, as the gradients were scaled by it.
    Tensor s = scale_.defined() ? scale_.to(device)
                                : full({}, options_.init_scale, {.dtype = kFloat32, .device = device});
    inv_scale.push_back(reciprocal(s));
    return inv_scale.back();
  };
  for (const auto& group : optimizer.param_groups()) {
    for (const Tensor& param : group.params) {
      if (!param.grad().defined()) continue;
      Tensor grad = param.grad();
      Tensor& flag = flag_for(state.found_inf, grad.device());
      const bool eligible = dispatch(
          "unscale_", grad, [] { return false; }, [&] { return cuda::unscale_eligible(grad); });
      if (eligible) {
        fused[grad.device().index].push_back(grad);
        continue;
      }
      // Any other gradient: scale in place (in float32, so a small 1/scale does not underflow
      // 16 bits), and add sum(g * 0) to the flag, which is NaN exactly when some element is inf
      // or NaN (inf * 0 = NaN) and 0 otherwise. Stays on the device.
      const Tensor inv = inv_on(grad.device());
      if (grad.dtype() == kFloat32 || grad.dtype() == kFloat64) {
        grad.mul_(inv.to(grad.dtype()));
      } else {
        grad.copy_(grad.to(kFloat32) * inv);
      }
      flag = flag + sum(grad * 0.0);
    }
  }
  for (auto& entry : fused) {  // not a structured binding: lambdas capture it (clang before 16)
    const Device device = Device::cuda(entry.first);
    auto& grads = entry.second;
    dispatch(
        "unscale_", device, [] { NABLA_ASSERT(false, "a CPU gradient reached the fused unscale"); },
        [&] { cuda::multi_tensor_unscale(grads, inv_on(device), flag_for(state.found_inf, device)); });
  }
  state.unscaled = true;
}

void GradScaler::agree(PerOptimizer& state) {
  if (state.agreed) return;
  state.agreed = true;
  if (!options_.reduce_found_inf) return;
  for (Tensor& flag : state.found_inf) options_.reduce_found_inf(flag);  // agree across ranks
}

void GradScaler::step(optim::Optimizer& optimizer) {
  if (!options_.enabled) {
    optimizer.step();
    return;
  }
  PerOptimizer& state = per_optimizer_[&optimizer];
  NABLA_CHECK(!state.stepped, "GradScaler::step: already called for this optimizer since the last update()");
  if (!state.unscaled) unscale_(optimizer);
  state.stepped = true;
  agree(state);
  if (state.found_inf.empty()) {  // no gradients: nothing can overflow
    optimizer.step();
    return;
  }
  if (state.found_inf.size() == 1 && optimizer.step_unless(state.found_inf[0])) return;
  // The optimizer cannot skip on the device: read the flags (the one host wait of the step).
  bool found = false;
  for (const Tensor& flag : state.found_inf) found = found || is_set(flag.item<float>());
  if (!found) optimizer.step();
}

Tensor GradScaler::flag_sum() {
  // On the scale's device, or (before any scale()) on the first flag's.
  Device device = scale_.defined() ? scale_.device() : Device::cpu();
  for (auto& [optimizer, state] : per_optimizer_) {
    if (!scale_.defined() && !state.found_inf.empty()) device = state.found_inf[0].device();
  }
  Tensor total = zeros({}, {.dtype = kFloat32, .device = device});
  for (auto& [optimizer, state] : per_optimizer_) {
    agree(state);
    for (const Tensor& flag : state.found_inf) total = total + sum(flag.to(device));
  }
  return total;
}

void GradScaler::update() {
  if (!options_.enabled) return;
  NABLA_CHECK(!per_optimizer_.empty(),
              "GradScaler::update: no step() or unscale_() since the last update(), so there is no inf/NaN "
              "check to update from");
  NoGradGuard no_grad;
  last_found_ = flag_sum();
  ensure_scale(scale_.defined() ? scale_.device() : last_found_.device());
  per_optimizer_.clear();
  if (!options_.dynamic) return;
  // On the device, as PyTorch's _amp_update_scale_: back off and restart the count on inf/NaN
  // (NaN != 0 holds), else count the good step and grow every growth_interval of them, unless
  // the grown scale would not be a finite float32 (a float32 loss times it would overflow).
  const Tensor found = ne(last_found_, 0.0);
  const Tensor zero = zeros_like(tracker_);
  const Tensor counted = where(found, zero, tracker_ + 1.0);
  const Tensor grow = ge(counted, static_cast<double>(options_.growth_interval));
  const Tensor grown = scale_ * options_.growth_factor;
  const Tensor kept = where(le(grown, static_cast<double>(std::numeric_limits<float>::max())), grown, scale_);
  const Tensor next_scale = where(found, scale_ * options_.backoff_factor, where(grow, kept, scale_));
  const Tensor next_tracker = where(grow, zero, counted);
  // In place: a CUDA graph that captured this step reads and writes these very buffers on every
  // replay (a new tensor here would leave the graph updating a copy nobody reads).
  scale_.copy_(next_scale);
  tracker_.copy_(next_tracker);
}

bool GradScaler::found_inf() {
  const Tensor flags = !per_optimizer_.empty() ? flag_sum() : last_found_;
  if (!flags.defined()) return false;
  return is_set(flags.item<float>());
}

double GradScaler::get_scale() const {
  return scale_.defined() ? scale_.item<double>() : options_.init_scale;
}

int64_t GradScaler::growth_tracker() const {
  return static_cast<int64_t>(tracker_.defined() ? tracker_.item<double>() : initial_tracker_);
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
  return {{"scale", scalar(get_scale())},
          {"growth_factor", scalar(options_.growth_factor)},
          {"backoff_factor", scalar(options_.backoff_factor)},
          {"growth_interval", scalar(static_cast<double>(options_.growth_interval))},
          {"growth_tracker", scalar(static_cast<double>(growth_tracker()))},
          {"dynamic", scalar(options_.dynamic ? 1.0 : 0.0)},
          {"enabled", scalar(options_.enabled ? 1.0 : 0.0)}};
}

void GradScaler::load_state_dict(const std::map<std::string, Tensor>& state) {
  GradScalerOptions o = options_;
  o.init_scale = state_value(state, "scale");
  o.growth_factor = state_value(state, "growth_factor");
  o.backoff_factor = state_value(state, "backoff_factor");
  o.growth_interval = optim::detail::count_value(state, "growth_interval");
  o.dynamic = state_value(state, "dynamic") != 0.0;
  o.enabled = state_value(state, "enabled") != 0.0;
  const double tracker = state_value(state, "growth_tracker");
  check_options(o);
  NABLA_CHECK(tracker >= 0 && tracker < static_cast<double>(o.growth_interval),
              "GradScaler::load_state_dict: growth_tracker must be in [0, growth_interval = {}), got {}",
              o.growth_interval, tracker);
  options_ = o;
  initial_tracker_ = tracker;
  if (scale_.defined()) {  // in place, on its device (a captured step reads these buffers)
    scale_.fill_(o.init_scale);
    tracker_.fill_(tracker);
  }
  per_optimizer_.clear();
  last_found_ = Tensor();
}

}  // namespace nabla::amp
