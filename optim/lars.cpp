// LARS: per tensor with ordinary ops; the trust ratio is a 0-d device tensor, never read back.
#include "nabla/optim/lars.h"

#include "nabla/core/autograd/grad_mode.h"
#include "nabla/core/error.h"
#include "nabla/ops/elementwise.h"
#include "nabla/ops/factory.h"
#include "nabla/ops/reduce.h"

namespace nabla::optim {

LARS::LARS(std::vector<ParamGroup> groups, LarsOptions options)
    : Optimizer(std::move(groups),
                {.lr = options.lr, .weight_decay = options.weight_decay, .momentum = options.momentum},
                "LARS"),
      options_(options) {
  NABLA_CHECK(options.eta > 0.0, "LARS: eta must be > 0, got {}", options.eta);
}

LARS::LARS(TensorList params, LarsOptions options) : LARS(one_group(std::move(params)), options) {}

void LARS::step() {
  NoGradGuard no_grad;
  refuse_capture(
      "LARS",
      "its update takes the learning rate and trust ratios as host scalars, which a graph would hold "
      "constant; step it outside the graph, or train with SGD or Adam(W)");
  begin_step();
  for (size_t g = 0; g < groups_.size(); ++g) {
    auto& group = groups_[g];
    const double lr = *group.lr, momentum = *group.momentum;
    const double wd = group.skip_adaptation ? 0.0 : *group.weight_decay;
    for (size_t i = 0; i < group.params.size(); ++i) {
      Tensor& param = group.params[i];
      const Tensor& grad = param.grad();
      if (!grad.defined()) continue;
      Tensor scaled;  // lr * trust * (g + wd * w)
      if (group.skip_adaptation) {
        scaled = mul(grad, lr);
      } else {
        Tensor w_norm = norm(param), g_norm = norm(grad);
        Tensor trust = div(mul(w_norm, options_.eta), add(g_norm, w_norm, wd));
        Tensor one = ones_like(trust);
        trust = where(gt(w_norm, 0.0), where(gt(g_norm, 0.0), trust, one), one);
        scaled = mul(add(grad, param, wd), mul(trust, lr));
      }
      auto& st = state(g, i);
      auto it = st.find("momentum_buffer");
      Tensor buffer = it == st.end() ? (st["momentum_buffer"] = zeros_like(param)) : it->second;
      buffer.mul_(momentum).add_(scaled);
      if (options_.nesterov) {
        param.sub_(add(scaled, buffer, momentum));
      } else {
        param.sub_(buffer);
      }
    }
  }
}

}  // namespace nabla::optim
