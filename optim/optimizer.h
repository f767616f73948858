// Public header. The Optimizer base: parameter groups with per-group hyper-parameters, per-
// parameter state, zero_grad, and a state_dict of tensors (scalars as 0-d tensors) so the whole
// optimizer saves into a safetensors file. Optimizers see lists of tensors, never Modules.
//
//   auto opt = nb::optim::SGD(nb::optim::param_groups(model->named_parameters(),
//                                                    {.no_weight_decay = {"bn", "bias"}}, 1e-4),
//                             {.lr = 0.1, .momentum = 0.9});
#pragma once

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "nabla/core/tensor.h"

namespace nabla::optim {

// One group of parameters. Unset hyper-parameters take the optimizer's defaults when the
// optimizer is built; from then on they are always set, and schedulers write `lr`.
struct ParamGroup {
  TensorList params = {};
  std::optional<double> lr = std::nullopt;
  std::optional<double> weight_decay = std::nullopt;
  std::optional<double> momentum = std::nullopt;
  // LARS: no trust-ratio adaptation and no weight decay for this group (BN and bias).
  bool skip_adaptation = false;
};

// All of `params` as one group with the optimizer's defaults (the optimizers' TensorList
// constructors).
std::vector<ParamGroup> one_group(TensorList params);

struct ParamGroupSplit {
  std::vector<std::string> no_weight_decay = {};  // a name containing any of these goes to group 1
  // Every parameter of at most one dimension goes to group 1: the biases and the normalization
  // layers' scales and shifts, whatever the model names them (MLPerf's and timm's rule).
  bool no_weight_decay_on_vectors = false;
};

// Splits named parameters into {decayed (weight_decay), not decayed (0, skip_adaptation)}.
// A group with no parameters is left out.
std::vector<ParamGroup> param_groups(const std::vector<std::pair<std::string, Tensor>>& named_params,
                                     const ParamGroupSplit& split, double weight_decay);

using StateDict = std::map<std::string, Tensor>;

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;
  // Nor movable: schedulers, GradScalers and CUDA graphs' replay hooks hold its address.
  Optimizer(Optimizer&&) = delete;
  Optimizer& operator=(Optimizer&&) = delete;

  // One update of every parameter that has a gradient, under NoGradGuard.
  virtual void step() = 0;
  // step(), decided on the device: no parameter or state changes while `found_inf` (a 1-element
  // float32 flag, GradScaler's) is nonzero or NaN, and the host never reads it. Returns false,
  // doing nothing, where this optimizer cannot (the caller then reads the flag and calls step()).
  // A step skipped this way still counts in step_count().
  virtual bool step_unless(const Tensor& found_inf) {
    (void)found_inf;
    return false;
  }
  // set_to_none drops the gradients (the next backward allocates); otherwise zeroes them.
  void zero_grad(bool set_to_none = true);

  std::vector<ParamGroup>& param_groups() { return groups_; }
  const std::vector<ParamGroup>& param_groups() const { return groups_; }
  int64_t step_count() const { return step_; }

  // Keys: "step", "param_groups.<g>.{lr,weight_decay,momentum}",
  // "state.<g>.<i>.<name>" (for example momentum_buffer, exp_avg, exp_avg_sq, step).
  StateDict state_dict() const;
  // Needs the same groups with the same parameter counts; state tensors move to each
  // parameter's device and dtype.
  void load_state_dict(const StateDict& state);

 protected:
  struct Defaults {
    double lr = 0.0;
    double weight_decay = 0.0;
    double momentum = 0.0;
  };
  Optimizer(std::vector<ParamGroup> groups, Defaults defaults, const char* name);

  // The state of parameter `index` of group `group` (empty until its first update).
  std::map<std::string, Tensor>& state(size_t group, size_t index) { return state_[group][index]; }
  // The state entries a parameter needs once it has any (load_state_dict refuses a file that
  // holds only some of them, which the next step would trip over). None by default.
  virtual std::vector<std::string> required_state() const { return {}; }

  // The host's part of one step, which every step() and step_unless() starts with: counts the
  // step and writes changed learning rates to their device copies (device_lr). Eagerly it runs
  // at once; in a CUDA graph capture it runs before every replay instead (Note [Per-step values
  // in a CUDA graph] in core/cuda/graph.h), and fails the replay, naming it, if a hyper-parameter
  // the graph holds as a constant (weight_decay, momentum) has changed since the capture.
  void begin_step();
  // Group g's learning rate as a 1-element float32 tensor on `device`, which fused kernels read:
  // a replayed graph then sees the rate a scheduler set. Eagerly it holds *lr when created and
  // after each begin_step().
  const Tensor& device_lr(size_t group, Device device);
  // For updates with ordinary ops, whose scalars a graph would freeze: a clear error while
  // capturing, "<what> cannot be captured into a CUDA graph: <why>" (the fused updates take
  // device scalars and may be captured).
  static void refuse_capture(const char* what, const std::string& why);

  std::vector<ParamGroup> groups_;
  std::vector<std::vector<std::map<std::string, Tensor>>> state_;
  int64_t step_ = 0;

 private:
  struct DeviceLr {
    Tensor value;        // 1-element float32
    double written = 0;  // what the host last wrote to it (NaN: nothing yet)
  };
  void write_device_lrs();
  const char* name_;
  std::vector<DeviceLr> device_lrs_;  // per group (undefined until a fused update asks)
};

namespace detail {
// A 0-d float64 CPU tensor, for scalars in state dicts.
Tensor scalar_tensor(double value);
double scalar_value(const StateDict& state, const std::string& key);
// A step or update count: a whole number in [0, 2^53], or an error naming the key.
int64_t count_value(const StateDict& state, const std::string& key);
}  // namespace detail

}  // namespace nabla::optim
