// Public header. GradScaler: loss scaling for float16 training, with a step that is skipped
// when any gradient overflowed.
//
//   auto scaler = nabla::amp::GradScaler();          // dynamic: 65536, x2 / 2000 good steps, x0.5
//   opt.zero_grad();
//   scaler.scale(loss).backward();                   // gradients carry the scale
//   scaler.unscale_(opt);                            // optional: to clip the true gradients
//   scaler.step(opt);                                // unscales if needed; skips on inf/NaN
//   scaler.update();                                 // grows or backs off the scale
//
// Skip decision, without waiting for the GPU. The scale is a float32 tensor on the loss's
// device, as are its growth counter and the found-inf flag, and nothing of them is read by the
// host during training. unscale_ multiplies every gradient by 1/scale and raises the flag on the
// gradients' device when any result is inf or NaN: on CUDA one fused multi-tensor kernel covers
// all dense float32 gradients (amp/cuda/unscale.cu), and other gradients (CPU, or 16-bit) add
// their check into the same flag with ordinary ops. step() hands the flag to an optimizer that
// can skip on the device (SGD's fused CUDA update: optim::Optimizer::step_unless); for any
// other it reads the flag (one device-to-host read) and calls optimizer.step() only when it is
// clear. update() grows or backs off the scale with device ops. get_scale(), found_inf() and
// state_dict() read the device values, so they wait for the GPU: for logs and checkpoints.
//
// Static scaling: {.dynamic = false} keeps init_scale forever (steps are still skipped on
// inf/NaN). {.enabled = false} makes every call a pass-through. With bfloat16 autocast, whose
// range is float32's, scaling is not needed: scale() says so once, in a warning.
//
// overflowed_parameters() names the parameters whose gradient holds inf/NaN, with counts; it
// reads every gradient, so it runs only when asked (say after a skipped step).
// state_dict() is a map of 0-d float64 CPU tensors, ready for a safetensors checkpoint.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "nabla/core/tensor.h"
#include "nabla/optim/optimizer.h"

namespace nabla::amp {

struct GradScalerOptions {
  double init_scale = 65536.0;
  double growth_factor = 2.0;      // > 1
  double backoff_factor = 0.5;     // in (0, 1)
  int64_t growth_interval = 2000;  // good steps in a row before the scale grows
  bool dynamic = true;             // false: the scale stays init_scale
  bool enabled = true;             // false: scale() returns the loss, step() just steps
  // Data-parallel training: makes every rank's inf/NaN flag the maximum over ranks before it is
  // read, so all ranks skip or step together (distributed::agree_found_inf(group) gives one).
  // Called once per device flag (a 1-element float32 tensor), in place.
  std::function<void(Tensor& found_inf)> reduce_found_inf = {};
};

// One parameter whose gradient is not finite.
struct Overflow {
  size_t group = 0;  // its optimizer parameter group
  size_t index = 0;  // its index in that group
  std::string name;  // from the named parameters given, or empty
  Shape shape;
  int64_t nonfinite = 0;  // how many gradient elements are inf or NaN
};

class GradScaler {
 public:
  explicit GradScaler(GradScalerOptions options = {});

  // loss * scale (the loss itself when disabled).
  Tensor scale(const Tensor& loss);
  // Divides the optimizer's gradients by the scale in place and records whether any is inf or
  // NaN. At most once per optimizer between two update()s.
  void unscale_(optim::Optimizer& optimizer);
  // Unscales (unless unscale_ ran), then steps the optimizer unless a gradient was inf or NaN
  // (decided on the device where the optimizer can; see above).
  void step(optim::Optimizer& optimizer);
  // Adjusts the scale from this iteration's overflow checks (dynamic mode), and starts the next
  // iteration. Needs a step() or unscale_() since the last update().
  void update();
  // Whether a gradient was inf or NaN (so step() skipped): in the iteration under way once it
  // has unscaled, else in the one the last update() closed. Reads device flags: waits for the GPU.
  bool found_inf();

  // The current scale and good-step count. They live on the device: reading waits for the GPU.
  double get_scale() const;
  int64_t growth_tracker() const;
  bool is_enabled() const { return options_.enabled; }
  // Whether scale() has warned that bfloat16 autocast needs no scaler.
  bool warned_bfloat16() const { return warned_bfloat16_; }
  const GradScalerOptions& options() const { return options_; }

  // The parameters of `optimizer` whose gradient holds inf or NaN, in group order. Names come
  // from `named_parameters` (e.g. model->named_parameters()) when given. Reads every gradient.
  std::vector<Overflow> overflowed_parameters(
      const optim::Optimizer& optimizer,
      const std::vector<std::pair<std::string, Tensor>>& named_parameters = {}) const;

  // Keys: scale, growth_factor, backoff_factor, growth_interval, growth_tracker, dynamic, enabled.
  std::map<std::string, Tensor> state_dict() const;
  void load_state_dict(const std::map<std::string, Tensor>& state);

 private:
  struct PerOptimizer {
    bool unscaled = false;
    bool stepped = false;
    TensorList found_inf;  // one 1-element float32 flag per gradient device (inf/NaN when set)
    bool agreed = false;   // reduce_found_inf ran on the flags
  };
  void agree(PerOptimizer& state);
  // The sum of every flag so far (0-d, on the scale's device): nonzero or NaN when any is set.
  Tensor flag_sum();
  void ensure_scale(Device device);

  GradScalerOptions options_;
  Tensor scale_;                // 0-d float32 on the device of the losses it scales (created by scale())
  Tensor tracker_;              // 0-d float32 beside it: good steps in a row
  double initial_tracker_ = 0;  // for the tracker created with the scale (load_state_dict)
  Tensor last_found_;           // flag_sum() at the last update()
  bool warned_bfloat16_ = false;
  uint64_t scopes_at_construction_;  // autocast::enabled_scope_count() when built
  std::map<const optim::Optimizer*, PerOptimizer> per_optimizer_;
};

}  // namespace nabla::amp
