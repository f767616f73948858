// SGD: per tensor with ordinary ops, or one fused launch for the group's eligible CUDA tensors.
#include "nabla/optim/sgd.h"

#include "nabla/core/autograd/grad_mode.h"
#include "nabla/core/dispatch.h"
#include "nabla/core/error.h"
#include "nabla/ops/elementwise.h"
#include "nabla/ops/factory.h"
#include "nabla/optim/multi_tensor.h"

namespace nabla::optim {

SGD::SGD(std::vector<ParamGroup> groups, SgdOptions options)
    : Optimizer(std::move(groups),
                {.lr = options.lr, .weight_decay = options.weight_decay, .momentum = options.momentum},
                "SGD"),
      options_(options) {
  NABLA_CHECK(options.dampening >= 0.0, "SGD: dampening must be >= 0, got {}", options.dampening);
  for (const auto& group : groups_) {
    NABLA_CHECK(!options.nesterov || (*group.momentum > 0.0 && options.dampening == 0.0),
                "SGD: nesterov needs momentum > 0 and dampening == 0 (momentum {}, dampening {})",
                *group.momentum, options.dampening);
  }
}

SGD::SGD(TensorList params, SgdOptions options) : SGD(one_group(std::move(params)), options) {}

void SGD::step() {
  update(Tensor());
}

bool SGD::step_unless(const Tensor& found_inf) {
  // dampening 0: a buffer whose first step was skipped stays zero, and the next step's
  // momentum * 0 + grad is the same as a first step's buffer = grad (dampening would differ).
  if (options_.dampening != 0.0 || !found_inf.is_cuda()) return false;
  for (size_t g = 0; g < groups_.size(); ++g) {
    for (size_t i = 0; i < groups_[g].params.size(); ++i) {
      const Tensor& param = groups_[g].params[i];
      if (!param.grad().defined()) continue;
      auto& st = state(g, i);
      auto it = st.find("momentum_buffer");
      const Tensor buffer = it == st.end() ? Tensor() : it->second;
      if (param.device() != found_inf.device() || !fusable(param, {param.grad(), buffer})) return false;
    }
  }
  update(found_inf);
  return true;
}

void SGD::update(const Tensor& skip_if) {
  NoGradGuard no_grad;
  begin_step();
  for (size_t g = 0; g < groups_.size(); ++g) {
    auto& group = groups_[g];
    const double lr = *group.lr, wd = *group.weight_decay, momentum = *group.momentum;
    TensorList fused_params, fused_grads, fused_buffers;
    std::vector<bool> fused_first;
    for (size_t i = 0; i < group.params.size(); ++i) {
      Tensor& param = group.params[i];
      const Tensor& grad = param.grad();
      if (!grad.defined()) continue;
      auto& st = state(g, i);
      auto it = st.find("momentum_buffer");
      const bool first = it == st.end();
      Tensor buffer = first ? Tensor() : it->second;
      if (fusable(param, {grad, buffer})) {
        // A new buffer takes the parameter's layout. The kernel sets it to d_p; it starts at
        // zero for a step the kernel may skip (see step_unless).
        if (momentum != 0.0 && first) {
          buffer = st["momentum_buffer"] = param.detach().clone();
          if (skip_if.defined()) buffer.zero_();
        }
        fused_params.push_back(param);
        fused_grads.push_back(grad);
        fused_buffers.push_back(buffer);
        fused_first.push_back(first);
        continue;
      }
      // step_unless took this path only after checking every tensor is fused, so the skip is
      // never lost on an unfused one.
      NABLA_ASSERT(!skip_if.defined());
      refuse_capture(
          "SGD", fmt::format("parameter {} of group {} ({}) is outside the fused CUDA update (dense float32 "
                             "in the gradient's layout), so its update would hold the learning rate as "
                             "a constant; step it outside the graph",
                             i, g, describe(param)));
      Tensor d_p = grad;
      if (wd != 0.0) d_p = add(d_p, param, wd);
      if (momentum != 0.0) {
        if (first) {
          buffer = st["momentum_buffer"] = d_p.detach().clone();
        } else {
          buffer = it->second;
          buffer.mul_(momentum).add_(d_p, 1.0 - options_.dampening);
        }
        d_p = options_.nesterov ? add(d_p, buffer, momentum) : buffer;
      }
      param.sub_(d_p, lr);
    }
    if (!fused_params.empty()) {
      run_fused("SGD", fused_params.front(), [&] {
        cuda::multi_tensor_sgd(fused_params, fused_grads, fused_buffers, fused_first,
                               {.lr = device_lr(g, fused_params.front().device()),
                                .weight_decay = wd,
                                .momentum = momentum,
                                .dampening = options_.dampening,
                                .nesterov = options_.nesterov,
                                .skip_if = skip_if});
      });
    }
  }
}

}  // namespace nabla::optim
