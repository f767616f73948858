// The Optimizer base: group defaults, zero_grad and the tensor state dict.
#include "nabla/optim/optimizer.h"

#include <fmt/ranges.h>

#include <charconv>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <set>

#include "nabla/core/autograd/grad_mode.h"
#include "nabla/core/cuda/graph.h"
#include "nabla/core/cuda/stream.h"
#include "nabla/core/error.h"
#include "nabla/ops/factory.h"

namespace nabla::optim {

namespace detail {
Tensor scalar_tensor(double value) {
  return full({}, value, {.dtype = kFloat64});
}

double scalar_value(const StateDict& state, const std::string& key) {
  auto it = state.find(key);
  NABLA_CHECK(it != state.end(), "load_state_dict: missing key '{}'", key);
  NABLA_CHECK(it->second.numel() == 1, "load_state_dict: '{}' must hold one value, has shape {}", key,
              shape_str(it->second.sizes()));
  return it->second.to(kFloat64).cpu().item<double>();
}

int64_t count_value(const StateDict& state, const std::string& key) {
  const double v = scalar_value(state, key);
  // Counts above 2^53 are not exact in float64, which is how state dicts store them.
  NABLA_CHECK(v >= 0 && v <= 9007199254740992.0 && v == std::floor(v),
              "load_state_dict: '{}' is {}; a count must be a whole number in [0, 2^53]", key, v);
  return static_cast<int64_t>(v);
}
}  // namespace detail

std::vector<ParamGroup> one_group(TensorList params) {
  std::vector<ParamGroup> groups(1);
  groups[0].params = std::move(params);
  return groups;
}

std::vector<ParamGroup> param_groups(const std::vector<std::pair<std::string, Tensor>>& named_params,
                                     const ParamGroupSplit& split, double weight_decay) {
  ParamGroup decay, no_decay;
  decay.weight_decay = weight_decay;
  no_decay.weight_decay = 0.0;
  no_decay.skip_adaptation = true;
  for (const auto& [name, param] : named_params) {
    bool excluded = split.no_weight_decay_on_vectors && param.dim() <= 1;
    for (const auto& pattern : split.no_weight_decay)
      excluded = excluded || name.find(pattern) != std::string::npos;
    (excluded ? no_decay : decay).params.push_back(param);
  }
  std::vector<ParamGroup> groups;
  if (!decay.params.empty()) groups.push_back(std::move(decay));
  if (!no_decay.params.empty()) groups.push_back(std::move(no_decay));
  return groups;
}

Optimizer::Optimizer(std::vector<ParamGroup> groups, Defaults defaults, const char* name)
    : groups_(std::move(groups)), name_(name) {
  NABLA_CHECK(!groups_.empty(), "{}: needs at least one parameter group", name);
  for (size_t g = 0; g < groups_.size(); ++g) {
    auto& group = groups_[g];
    NABLA_CHECK(!group.params.empty(), "{}: parameter group {} is empty", name, g);
    for (size_t i = 0; i < group.params.size(); ++i) {
      NABLA_CHECK(group.params[i].defined() && group.params[i].is_floating_point(),
                  "{}: parameter {} of group {} must be a defined floating-point tensor", name, i, g);
    }
    if (!group.lr) group.lr = defaults.lr;
    if (!group.weight_decay) group.weight_decay = defaults.weight_decay;
    if (!group.momentum) group.momentum = defaults.momentum;
    NABLA_CHECK(*group.lr >= 0.0, "{}: lr must be >= 0, got {} in group {}", name, *group.lr, g);
    NABLA_CHECK(*group.weight_decay >= 0.0, "{}: weight_decay must be >= 0, got {} in group {}", name,
                *group.weight_decay, g);
    NABLA_CHECK(*group.momentum >= 0.0, "{}: momentum must be >= 0, got {} in group {}", name,
                *group.momentum, g);
    state_.emplace_back(group.params.size());
  }
  device_lrs_.resize(groups_.size());
}

void Optimizer::begin_step() {
  if (!cuda::is_capturing()) {
    ++step_;
    write_device_lrs();
    return;
  }
  // Captured: the graph holds weight decay and momentum as kernel arguments. The check runs
  // before any replay hook, so a refused replay changes nothing.
  std::vector<std::pair<double, double>> captured;
  for (const auto& group : groups_) captured.emplace_back(*group.weight_decay, *group.momentum);
  cuda::on_replay_check([this, captured] {
    for (size_t g = 0; g < groups_.size(); ++g) {
      const auto& group = groups_[g];
      NABLA_CHECK(*group.weight_decay == captured[g].first && *group.momentum == captured[g].second,
                  "{}: group {} changed weight_decay/momentum from ({}, {}) to ({}, {}) after its step was "
                  "captured into a CUDA graph, which holds them as constants; only lr may change between "
                  "replays (capture the step again to change the others)",
                  name_, g, captured[g].first, captured[g].second, *group.weight_decay, *group.momentum);
    }
  });
  cuda::on_replay([this] {
    ++step_;
    write_device_lrs();
  });
}

void Optimizer::write_device_lrs() {
  for (size_t g = 0; g < groups_.size(); ++g) {
    DeviceLr& lr = device_lrs_[g];
    // Equal values need no launch (NaN, never written, never compares equal).
    if (!lr.value.defined() || lr.written == *groups_[g].lr) continue;
    lr.value.fill_(*groups_[g].lr);
    lr.written = *groups_[g].lr;
  }
}

const Tensor& Optimizer::device_lr(size_t group, Device device) {
  DeviceLr& lr = device_lrs_[group];
  if (lr.value.defined() && lr.value.device() == device) return lr.value;
  lr.written = std::numeric_limits<double>::quiet_NaN();
  if (cuda::is_capturing()) {
    // The replay hook writes it (a fill here would be recorded with today's rate), so it must
    // not share a block with the graph's scratch (cuda::allocate_outside_capture).
    const cuda::StreamGuard side(cuda::stream_outside_capture(device.index));
    lr.value = empty({1}, {.dtype = kFloat32, .device = device});
  } else {
    lr.value = empty({1}, {.dtype = kFloat32, .device = device});
    write_device_lrs();
  }
  return lr.value;
}

void Optimizer::refuse_capture(const char* what, const std::string& why) {
  NABLA_CHECK(!cuda::is_capturing(), "{} cannot be captured into a CUDA graph: {}", what, why);
}

void Optimizer::zero_grad(bool set_to_none) {
  NoGradGuard no_grad;
  for (auto& group : groups_) {
    for (auto& param : group.params) {
      if (!param.grad().defined()) continue;
      if (set_to_none) {
        param.set_grad(Tensor());
      } else {
        param.mutable_grad().zero_();
      }
    }
  }
}

StateDict Optimizer::state_dict() const {
  StateDict out;
  out["step"] = detail::scalar_tensor(static_cast<double>(step_));
  for (size_t g = 0; g < groups_.size(); ++g) {
    const auto prefix = "param_groups." + std::to_string(g) + ".";
    out[prefix + "lr"] = detail::scalar_tensor(*groups_[g].lr);
    out[prefix + "weight_decay"] = detail::scalar_tensor(*groups_[g].weight_decay);
    out[prefix + "momentum"] = detail::scalar_tensor(*groups_[g].momentum);
    for (size_t i = 0; i < state_[g].size(); ++i) {
      for (const auto& [name, value] : state_[g][i]) {
        out["state." + std::to_string(g) + "." + std::to_string(i) + "." + name] = value.detach().clone();
      }
    }
  }
  return out;
}

namespace {

// The decimal index in `text`, or nullopt when it is not one (a state key from a damaged file).
std::optional<size_t> parse_index(const std::string& text) {
  size_t value = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || error != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

// A hyper-parameter as the constructor allows it: finite and not negative.
double hyper_parameter(const StateDict& state, const std::string& key) {
  const double v = detail::scalar_value(state, key);
  NABLA_CHECK(std::isfinite(v) && v >= 0, "load_state_dict: '{}' is {}; it must be finite and >= 0", key, v);
  return v;
}

}  // namespace

void Optimizer::load_state_dict(const StateDict& state) {
  NoGradGuard no_grad;
  // Everything is read and checked before anything changes, so a file that fails to load leaves
  // the optimizer as it was.
  const int64_t step = detail::count_value(state, "step");
  std::vector<ParamGroup> groups = groups_;
  for (size_t g = 0; g < groups.size(); ++g) {
    const auto prefix = "param_groups." + std::to_string(g) + ".";
    groups[g].lr = hyper_parameter(state, prefix + "lr");
    groups[g].weight_decay = hyper_parameter(state, prefix + "weight_decay");
    groups[g].momentum = hyper_parameter(state, prefix + "momentum");
  }
  struct Entry {
    size_t g, i;
    std::string name;
    const Tensor* value;
  };
  std::vector<Entry> entries;
  for (const auto& [key, value] : state) {
    if (key.rfind("state.", 0) != 0) continue;
    // state.<g>.<i>.<name>
    const auto first = key.find('.', 6);
    const auto second = first == std::string::npos ? first : key.find('.', first + 1);
    const auto g = second == std::string::npos ? std::nullopt : parse_index(key.substr(6, first - 6));
    const auto i =
        second == std::string::npos ? std::nullopt : parse_index(key.substr(first + 1, second - first - 1));
    NABLA_CHECK(g && i, "load_state_dict: malformed key '{}' (want state.<group>.<index>.<name>)", key);
    NABLA_CHECK(*g < groups_.size() && *i < groups_[*g].params.size(),
                "load_state_dict: key '{}' names a parameter this optimizer does not have ({} groups)", key,
                groups_.size());
    const auto name = key.substr(second + 1);
    const Tensor& param = groups_[*g].params[*i];
    if (name == "step") {
      (void)detail::count_value(state, key);
    } else {
      NABLA_CHECK(value.sizes() == param.sizes(), "load_state_dict: '{}' has shape {}, the parameter has {}",
                  key, shape_str(value.sizes()), shape_str(param.sizes()));
    }
    entries.push_back({*g, *i, name, &value});
  }
  std::map<std::pair<size_t, size_t>, std::set<std::string>> names;
  for (const auto& e : entries) names[{e.g, e.i}].insert(e.name);
  for (const auto& [where, present] : names) {
    for (const auto& needed : required_state()) {
      NABLA_CHECK(present.count(needed),
                  "load_state_dict: parameter {} of group {} has state but no '{}'; {} needs {}",
                  where.second, where.first, needed, name_, fmt::join(required_state(), ", "));
    }
  }

  step_ = step;
  groups_ = std::move(groups);
  auto previous = std::move(state_);
  state_.clear();
  for (const auto& group : groups_) state_.emplace_back(group.params.size());
  for (const auto& [g, i, name, value] : entries) {
    const Tensor& param = groups_[g].params[i];
    // Into the tensors the optimizer already has where they fit, in place: a CUDA graph that
    // captured a step reads and writes those very buffers.
    const auto existing = previous[g][i].find(name);
    Tensor* into = existing != previous[g][i].end() ? &existing->second : nullptr;
    if (name == "step") {
      if (into && into->is_cuda() && into->numel() == 1) {
        into->copy_(value->to(kFloat64).reshape(into->sizes()).to(into->device(), into->dtype()));
        state_[g][i][name] = *into;
      } else {
        state_[g][i][name] = value->to(Device::cpu(), kFloat64).reshape({}).clone();
      }
    } else {
      // In the parameter's layout (channels_last stays channels_last), so fused updates apply.
      const bool fits = into && into->sizes() == param.sizes() && into->strides() == param.strides() &&
                        into->dtype() == param.dtype() && into->device() == param.device();
      Tensor copy = fits ? *into : param.detach().clone();
      copy.copy_(value->to(param.device(), param.dtype()));
      state_[g][i][name] = copy;
    }
  }
}

}  // namespace nabla::optim
