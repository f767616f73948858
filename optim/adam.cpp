// Adam and AdamW: per tensor with ordinary ops, or one fused launch for the group's eligible
// CUDA tensors. A fused parameter's step count lives in its state as a 0-d float32 tensor on its
// device, which the kernel reads and increments (so a CUDA graph replays the bias corrections
// right, and a step the GradScaler skips does not count); an unfused one's is a 0-d float64 CPU
// tensor, and its bias corrections are host scalars. Neither synchronizes with the device.
#include "nabla/optim/adam.h"

#include <cmath>

#include "nabla/core/autograd/grad_mode.h"
#include "nabla/core/error.h"
#include "nabla/ops/elementwise.h"
#include "nabla/ops/factory.h"
#include "nabla/optim/multi_tensor.h"

namespace nabla::optim {

namespace {
AdamOptions from_adamw(const AdamWOptions& o) {
  return {.lr = o.lr,
          .beta1 = o.beta1,
          .beta2 = o.beta2,
          .eps = o.eps,
          .weight_decay = o.weight_decay,
          .amsgrad = o.amsgrad};
}
}  // namespace

Adam::Adam(std::vector<ParamGroup> groups, AdamOptions options, bool decoupled, const char* name)
    : Optimizer(std::move(groups), {.lr = options.lr, .weight_decay = options.weight_decay}, name),
      options_(options),
      decoupled_weight_decay_(decoupled) {
  NABLA_CHECK(options.beta1 >= 0.0 && options.beta1 < 1.0 && options.beta2 >= 0.0 && options.beta2 < 1.0,
              "{}: betas must be in [0, 1), got ({}, {})", name, options.beta1, options.beta2);
  NABLA_CHECK(options.eps >= 0.0, "{}: eps must be >= 0, got {}", name, options.eps);
}

Adam::Adam(std::vector<ParamGroup> groups, AdamOptions options)
    : Adam(std::move(groups), options, false, "Adam") {}
Adam::Adam(TensorList params, AdamOptions options) : Adam(one_group(std::move(params)), options) {}

AdamW::AdamW(std::vector<ParamGroup> groups, AdamWOptions options)
    : Adam(std::move(groups), from_adamw(options), true, "AdamW") {}
AdamW::AdamW(TensorList params, AdamWOptions options) : AdamW(one_group(std::move(params)), options) {}

void Adam::step() {
  update(Tensor());
}

bool Adam::step_unless(const Tensor& found_inf) {
  if (!found_inf.is_cuda()) return false;
  for (size_t g = 0; g < groups_.size(); ++g) {
    for (size_t i = 0; i < groups_[g].params.size(); ++i) {
      const Tensor& param = groups_[g].params[i];
      if (!param.grad().defined()) continue;
      auto& st = state(g, i);
      const auto at = [&](const char* name) {
        auto it = st.find(name);
        return it == st.end() ? Tensor() : it->second;
      };
      if (param.device() != found_inf.device() ||
          !fusable(param, {param.grad(), at("exp_avg"), at("exp_avg_sq"), at("max_exp_avg_sq")}))
        return false;
    }
  }
  update(found_inf);
  return true;
}

std::vector<std::string> Adam::required_state() const {
  std::vector<std::string> names = {"step", "exp_avg", "exp_avg_sq"};
  if (options_.amsgrad) names.push_back("max_exp_avg_sq");
  return names;
}

void Adam::update(const Tensor& skip_if) {
  NoGradGuard no_grad;
  begin_step();
  const double beta1 = options_.beta1, beta2 = options_.beta2, eps = options_.eps;
  for (size_t g = 0; g < groups_.size(); ++g) {
    auto& group = groups_[g];
    const double lr = *group.lr, wd = *group.weight_decay;
    TensorList f_params, f_grads, f_avg, f_avg_sq, f_max, f_steps;
    for (size_t i = 0; i < group.params.size(); ++i) {
      Tensor& param = group.params[i];
      const Tensor& grad = param.grad();
      if (!grad.defined()) continue;
      auto& st = state(g, i);
      if (st.find("step") == st.end()) {
        st["step"] = detail::scalar_tensor(0.0);
        // Zeros in the parameter's layout, so channels_last parameters stay fusable.
        const auto zeros_in_layout = [&] { return param.detach().clone().zero_(); };
        st["exp_avg"] = zeros_in_layout();
        st["exp_avg_sq"] = zeros_in_layout();
        if (options_.amsgrad) st["max_exp_avg_sq"] = zeros_in_layout();
      }
      Tensor exp_avg = st["exp_avg"], exp_avg_sq = st["exp_avg_sq"];
      Tensor max_sq = options_.amsgrad ? st["max_exp_avg_sq"] : Tensor();
      if (fusable(param, {grad, exp_avg, exp_avg_sq, max_sq})) {
        // The fused kernel keeps the count on the device (float32, as PyTorch's fused Adam):
        // a count from a checkpoint or a new state moves there once.
        Tensor& count = st["step"];
        if (!count.is_cuda() || count.device() != param.device() || count.dtype() != kFloat32)
          count = count.to(param.device(), kFloat32).clone();
        f_params.push_back(param);
        f_grads.push_back(grad);
        f_avg.push_back(exp_avg);
        f_avg_sq.push_back(exp_avg_sq);
        f_max.push_back(max_sq);
        f_steps.push_back(count);
        continue;
      }
      // step_unless took this path only after checking every tensor is fused.
      NABLA_ASSERT(!skip_if.defined());
      refuse_capture("Adam",
                     fmt::format("parameter {} of group {} ({}) is outside the fused CUDA update (dense "
                                 "float32 in the gradient's layout), so its update would hold the step count "
                                 "and learning rate as constants; step it outside the graph",
                                 i, g, describe(param)));
      Tensor& count = st["step"];
      if (count.is_cuda()) count = count.cpu().to(kFloat64);
      const auto t = static_cast<int64_t>(count.item<double>()) + 1;
      count = detail::scalar_tensor(static_cast<double>(t));
      Tensor grad_used = grad;
      if (wd != 0.0) {
        if (decoupled_weight_decay_) {
          param.mul_(1.0 - lr * wd);
        } else {
          grad_used = add(grad, param, wd);
        }
      }
      exp_avg.mul_(beta1).add_(grad_used, 1.0 - beta1);
      exp_avg_sq.mul_(beta2).add_(mul(grad_used, grad_used), 1.0 - beta2);
      const double bias_correction1 = 1.0 - std::pow(beta1, static_cast<double>(t));
      const double bias_correction2_sqrt = std::sqrt(1.0 - std::pow(beta2, static_cast<double>(t)));
      Tensor denom;
      if (options_.amsgrad) {
        max_sq.copy_(maximum(max_sq, exp_avg_sq));
        denom = sqrt(max_sq) / bias_correction2_sqrt + eps;
      } else {
        denom = sqrt(exp_avg_sq) / bias_correction2_sqrt + eps;
      }
      param.sub_(div(exp_avg, denom), lr / bias_correction1);
    }
    if (!f_params.empty()) {
      run_fused("Adam", f_params.front(), [&] {
        cuda::multi_tensor_adam(f_params, f_grads, f_avg, f_avg_sq, f_max, f_steps,
                                {.lr = device_lr(g, f_params.front().device()),
                                 .beta1 = beta1,
                                 .beta2 = beta2,
                                 .eps = eps,
                                 .weight_decay = wd,
                                 .decoupled_weight_decay = decoupled_weight_decay_,
                                 .amsgrad = options_.amsgrad,
                                 .skip_if = skip_if});
      });
    }
  }
}

}  // namespace nabla::optim
