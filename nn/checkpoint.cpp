#include "nabla/nn/checkpoint.h"

#include "nabla/core/autocast.h"
#include "nabla/core/autograd/grad_mode.h"
#include "nabla/core/cuda/runtime.h"
#include "nabla/core/generator.h"
#include "nabla/ops/autograd/engine.h"
#include "nabla/ops/autograd/function.h"
#include "nabla/ops/ops.h"

namespace nabla::nn {
namespace {

// The random streams a segment may draw from: the CPU's and each CUDA device's default
// generator. Philox state is (seed, offset), so saving and restoring it replays the same numbers.
struct RngSnapshot {
  std::vector<std::pair<Device, PhiloxState>> states;

  static RngSnapshot take() {
    RngSnapshot s;
    s.states.emplace_back(Device::cpu(), default_generator(Device::cpu()).state());
    for (int d = 0; d < cuda::device_count(); ++d) {
      s.states.emplace_back(Device::cuda(d), default_generator(Device::cuda(d)).state());
    }
    return s;
  }
  void restore() const {
    for (const auto& [device, state] : states) default_generator(device).set_state(state);
  }
};

// What the first run ran under and the replay must run under again: the random streams, the
// autocast state and the kernel routes (a replay under other routes could pick another algorithm,
// and a deterministic segment would lose its bit-identical gradients).
struct RunState {
  RngSnapshot rng = RngSnapshot::take();
  autocast::State autocast_state = autocast::current();
  Routes routes = nabla::routes();
};

// Puts a first run's state back for the replay; restores the generators and the autocast state on
// scope exit, and the routes through the guard.
struct ReplayScope {
  RngSnapshot saved_rng = RngSnapshot::take();
  autocast::State saved_autocast = autocast::current();
  RoutesGuard routes;
  explicit ReplayScope(const RunState& state) : routes(state.routes) {
    state.rng.restore();
    autocast::set_current(state.autocast_state);
  }
  ~ReplayScope() {
    saved_rng.restore();
    autocast::set_current(saved_autocast);
  }
  ReplayScope(const ReplayScope&) = delete;
  ReplayScope& operator=(const ReplayScope&) = delete;
};

}  // namespace

TensorList checkpoint(const SegmentFn& fn, const TensorList& inputs) {
  if (!autograd::needs_grad(inputs) && !GradMode::is_enabled()) return fn(inputs);
  const RunState state;

  // First run: nothing recorded. It works on copies, so an in-place op on an input leaves the
  // kept input (the caller's tensor) as the segment found it.
  TensorList outputs;
  {
    NoGradGuard no_grad;
    TensorList copies;
    for (const auto& t : inputs) copies.push_back(t.defined() ? t.clone(MemoryFormat::Preserve) : t);
    outputs = fn(copies);
  }
  // Parameters inside the segment need gradients even when no input does (the first segment
  // of a network takes the images), so the node is recorded whenever grad mode is on.
  if (!GradMode::is_enabled()) return outputs;
  for (auto& o : outputs) o = o.detach();  // fresh tensors the node can own as outputs

  autograd::record("Checkpoint", inputs, outputs, /*save=*/inputs,
                   [fn, state, n_outputs = outputs.size()](autograd::BackwardContext& ctx) {
                     // Second run, recorded, from the kept inputs under the first run's RNG, autocast and
                     // routes.
                     TensorList leaves, replay_inputs;
                     TensorList replayed;
                     {
                       EnableGradGuard grad_on;
                       for (size_t i = 0; i < ctx.saved.size(); ++i) {
                         const Tensor& saved = ctx.saved[i];
                         Tensor leaf = saved.defined() ? saved.detach() : saved;
                         if (leaf.defined() && ctx.needs(i)) leaf.requires_grad_(true);
                         leaves.push_back(leaf);
                         // A differentiable copy: the segment may write into it in place (a leaf that
                         // requires grad refuses that), and the kept input stays intact for another backward.
                         replay_inputs.push_back(leaf.defined() ? leaf.clone(MemoryFormat::Preserve) : leaf);
                       }
                       ReplayScope scope(state);
                       replayed = fn(replay_inputs);
                     }
                     NABLA_CHECK(
                         replayed.size() == n_outputs,
                         "checkpoint: the segment returned {} outputs when recomputed but {} the first time; "
                         "it must be deterministic in structure",
                         replayed.size(), n_outputs);
                     TensorList roots, root_grads;
                     for (size_t i = 0; i < replayed.size(); ++i) {
                       if (replayed[i].defined() && replayed[i].requires_grad() && ctx.grads[i].defined()) {
                         roots.push_back(replayed[i]);
                         root_grads.push_back(ctx.grads[i]);
                       }
                     }
                     if (!roots.empty()) autograd::backward(roots, root_grads);
                     TensorList grads;
                     for (const auto& leaf : leaves)
                       grads.push_back(leaf.defined() && leaf.requires_grad() ? leaf.grad() : Tensor());
                     return grads;
                   });
  return outputs;
}

Tensor checkpoint(const std::function<Tensor(const Tensor&)>& fn, const Tensor& input) {
  // By value: the node keeps this function until backward, long after the caller's returned.
  return checkpoint([fn](const TensorList& in) { return TensorList{fn(in[0])}; }, TensorList{input})[0];
}

Tensor checkpoint_sequential(const std::vector<Module*>& modules, int segments, const Tensor& input) {
  NABLA_CHECK(segments >= 1, "checkpoint_sequential: segments must be at least 1, got {}", segments);
  NABLA_CHECK(!modules.empty(), "checkpoint_sequential: no modules to run");
  const int n = static_cast<int>(modules.size());
  segments = std::min(segments, n);
  Tensor x = input;
  int begin = 0;
  for (int s = 0; s < segments; ++s) {
    int end = static_cast<int>((static_cast<int64_t>(s) + 1) * n / segments);
    // The module pointers by value: the caller's list may be gone by backward.
    auto run = [segment =
                    std::vector<Module*>(modules.begin() + begin, modules.begin() + end)](const Tensor& in) {
      Tensor y = in;
      for (Module* m : segment) y = m->forward(y);
      return y;
    };
    x = s + 1 < segments ? checkpoint(run, x) : run(x);
    begin = end;
  }
  return x;
}

Tensor checkpoint_sequential(const Sequential& seq, int segments, const Tensor& input) {
  std::vector<Module*> modules;
  for (size_t i = 0; i < seq.size(); ++i) modules.push_back(&seq[i]);
  return checkpoint_sequential(modules, segments, input);
}

}  // namespace nabla::nn
