// Loss front ends: cross_entropy, nll_loss, mse_loss and binary_cross_entropy_with_logits.
//
// cross_entropy on (N, C) logits runs fused kernels (ops/cpu/loss.cpp, ops/cuda/loss/cross_entropy.cu):
// one pass per row, 16-bit logits read as they are, only a per-row log-sum-exp kept for the
// backward. Other shapes (N, C, d1, ...) compose log_softmax and the pick below.
//
// The losses are compositions of differentiable ops (log_softmax, mean, where, sigmoid, ...), so
// they run on every backend and support create_graph. One piece has its own kernels: picking
// -logp at each target (`nll_pick`), with ignore_index handled in the kernel. A gather would do
// the same, but on CUDA gather reads its index range back to the host; the dedicated kernels
// never do, so a CUDA loss never waits for the device. Its backward writes -grad at the target
// positions and zeros elsewhere, and the gradient of that backward is the pick again.
//
// binary_cross_entropy_with_logits records one node with the closed-form gradients
// (sigmoid(x) - t, ...) instead of differentiating max(x, 0) and |x|, whose kinks at x = 0 would
// give a wrong gradient there (a zero-initialized classifier starts exactly at x = 0).
#include "nabla/ops/loss.h"

#include <optional>

#include "nabla/ops/autograd/function.h"
#include "nabla/ops/cpu/loss_kernels.h"
#include "nabla/ops/cuda/loss/kernels.h"
#include "nabla/ops/detail/alias.h"
#include "nabla/ops/detail/autocast_policy.h"
#include "nabla/ops/detail/dispatch.h"
#include "nabla/ops/elementwise.h"
#include "nabla/ops/factory.h"
#include "nabla/ops/reduce.h"
#include "nabla/ops/softmax.h"
#include "nabla/ops/view.h"

namespace nabla {

namespace {

bool is_16_bit(DType dtype) {
  return dtype == kFloat16 || dtype == kBFloat16;
}

// input (N, C, d1, ...) and target (N, d1, ...) int64.
void check_class_target(const char* op, const Tensor& input, const Tensor& target) {
  ops::check_defined(op, input, "input");
  ops::check_defined(op, target, "target");
  ops::check_same_device(op, {input, target});
  NABLA_CHECK(input.is_floating_point(), "{}: expected a floating-point input, got {}", op, describe(input));
  NABLA_CHECK(target.dtype() == kInt64, "{}: expected an int64 target of class indices, got {}", op,
              describe(target));
  NABLA_CHECK(input.dim() >= 2, "{}: expected an input of shape (N, C) or (N, C, d1, ...), got {}", op,
              describe(input));
  Shape expected{input.size(0)};
  for (int64_t d = 2; d < input.dim(); ++d) expected.push_back(input.size(d));
  NABLA_CHECK(target.sizes() == expected,
              "{}: expected a target of shape {} (the input {} without its class dim 1), got {}", op,
              shape_str(expected), describe(input), describe(target));
  NABLA_CHECK(input.size(1) > 0 || input.numel() == 0, "{}: expected at least one class, got {}", op,
              describe(input));
}

// (N, C, S) and (N, S) aliases of dense row-major tensors.
Tensor as_3d(const Tensor& t) {
  const int64_t n = t.size(0), c = t.size(1), s = t.numel() / std::max<int64_t>(n * c, 1);
  return ops::alias(t, {n, c, s}, {c * s, s, 1}, t.storage_offset());
}
Tensor as_2d(const Tensor& t, int64_t n, int64_t s) {
  return ops::alias(t, {n, s}, {s, 1}, t.storage_offset());
}

Tensor nll_pick_backward(const Tensor& grad, const Tensor& target, int64_t ignore_index,
                         const Shape& logp_sizes);

// -logp[n, target[n, ...], ...] per position of target, 0 where it equals ignore_index.
Tensor nll_pick(const char* op, const Tensor& logp, const Tensor& target, int64_t ignore_index) {
  const Tensor lp = as_3d(logp.detach().contiguous());
  const Tensor t = target.contiguous();
  Tensor out = Tensor::empty(target.sizes(), logp.options());
  const int64_t n = lp.size(0), c = lp.size(1), s = lp.size(2);
  ops::dispatch(
      "nll_forward", logp,
      [&] {
        const std::optional<int64_t> bad =
            ops::cpu::nll_forward(lp, as_2d(t, n, s), ignore_index, as_2d(out, n, s));
        NABLA_CHECK(!bad,
                    "{}: target {} is out of range for {} classes of input {} (expected 0 <= target < {}, or "
                    "ignore_index {})",
                    op, bad.value_or(0), c, describe(logp), c, ignore_index);
      },
      [&] { ops::cuda::nll_forward(lp, as_2d(t, n, s), ignore_index, as_2d(out, n, s)); });
  if (autograd::needs_grad({logp})) {
    autograd::record("nll_loss", {logp}, {out}, /*save=*/{t},
                     [ignore_index, sizes = logp.sizes()](autograd::BackwardContext& ctx) {
                       return TensorList{nll_pick_backward(ctx.grad(), ctx.saved[0], ignore_index, sizes)};
                     });
  }
  return out;
}

// The gradient of nll_pick: -grad at each target position, 0 elsewhere (row-major logp_sizes).
Tensor nll_pick_backward(const Tensor& grad, const Tensor& target, int64_t ignore_index,
                         const Shape& logp_sizes) {
  const Tensor g = grad.detach().contiguous();
  Tensor grad_logp = Tensor::empty(logp_sizes, grad.options());
  const Tensor gl = as_3d(grad_logp);
  const int64_t n = gl.size(0), s = gl.size(2);
  ops::dispatch(
      "nll_backward", grad,
      [&] { ops::cpu::nll_backward(as_2d(g, n, s), as_2d(target, n, s), ignore_index, gl); },
      [&] { ops::cuda::nll_backward(as_2d(g, n, s), as_2d(target, n, s), ignore_index, gl); });
  if (autograd::needs_grad({grad})) {
    autograd::record("nll_loss_backward", {grad}, {grad_logp}, /*save=*/{target},
                     [ignore_index](autograd::BackwardContext& ctx) {
                       return TensorList{nll_pick("nll_loss", ctx.grad(), ctx.saved[0], ignore_index)};
                     });
  }
  return grad_logp;
}

// Sums, or averages over the targets that are not ignore_index, in float32 for 16-bit losses
// (a float16 sum over a large batch would overflow).
Tensor reduce_class_loss(const Tensor& per, const Tensor& target, int64_t ignore_index, Reduction reduction) {
  if (reduction == Reduction::None) return per;
  const Tensor p = is_16_bit(per.dtype()) ? per.to(kFloat32) : per;
  Tensor total = sum(p);
  if (reduction == Reduction::Mean) {
    total = total / sum(ne(target, static_cast<double>(ignore_index))).to(p.dtype());
  }
  return total.to(per.dtype());
}

Tensor reduce_loss(const Tensor& per, Reduction reduction) {
  switch (reduction) {
    case Reduction::None:
      return per;
    case Reduction::Mean:
      return mean(per);
    case Reduction::Sum:
      return sum(per);
  }
  return per;
}

// Runs a class-index loss on unbatched input (C) with target () as a batch of one.
template <typename Loss>
Tensor unbatched_or(const Tensor& input, const Tensor& target, Reduction reduction, Loss loss) {
  if (input.defined() && target.defined() && input.dim() == 1 && target.dim() == 0) {
    Tensor out = loss(input.unsqueeze(0), target.unsqueeze(0));
    return reduction == Reduction::None ? out.squeeze(0) : out;
  }
  return loss(input, target);
}

void check_same_shape(const char* op, const Tensor& input, const Tensor& target) {
  ops::check_defined(op, input, "input");
  ops::check_defined(op, target, "target");
  ops::check_same_device(op, {input, target});
  NABLA_CHECK(input.is_floating_point() && target.is_floating_point(),
              "{}: expected floating-point input and target, got {} and {}", op, describe(input),
              describe(target));
  NABLA_CHECK(input.sizes() == target.sizes(), "{}: expected input and target of one shape, got {} and {}",
              op, describe(input), describe(target));
}

// softplus(-x) = log(1 + exp(-x)), stably.
Tensor softplus_neg(const Tensor& x) {
  return log(1.0 + exp(-abs(x))) + relu(-x);
}

// The gradient of fused_cross_entropy's per-row loss, written with differentiable ops (for
// create_graph): g * (softmax(x) - (1 - e) * onehot(t) - e / C) on rows not ignored.
Tensor cross_entropy_grad_ops(const Tensor& g, const Tensor& x, const Tensor& t,
                              const CrossEntropyOptions& o) {
  const Tensor xf = x.to(g.dtype());
  const int64_t C = x.size(1);
  const Tensor classes = arange(static_cast<double>(C), {.dtype = kInt64, .device = x.device()}).unsqueeze(0);
  const Tensor onehot = eq(classes, t.unsqueeze(1)).to(g.dtype());
  const Tensor kept = ne(t, static_cast<double>(o.ignore_index)).to(g.dtype()).unsqueeze(1);
  const double e = o.label_smoothing;
  return (softmax(xf, 1) - onehot * (1.0 - e) - e / static_cast<double>(C)) * kept * g.unsqueeze(1);
}

// Per-row losses (N) of (N, C) logits, in the compute dtype (float32 for 16-bit logits), from one
// fused kernel per backend; the backward recomputes softmax from the saved log-sum-exp.
Tensor fused_cross_entropy(const Tensor& logits, const Tensor& t, const CrossEntropyOptions& o) {
  const Tensor x = logits.contiguous();
  const int64_t N = x.size(0);
  const TensorOptions stats{.dtype = x.dtype() == kFloat64 ? kFloat64 : kFloat32, .device = x.device()};
  Tensor loss = Tensor::empty({N}, stats), lse = Tensor::empty({N}, stats);
  const Tensor target = t.contiguous();
  ops::dispatch(
      "cross_entropy", x,
      [&] {
        const auto bad =
            ops::cpu::cross_entropy_forward(x, target, o.ignore_index, o.label_smoothing, loss, lse);
        NABLA_CHECK(
            !bad,
            "cross_entropy: target {} is out of range for {} classes of input {} (expected 0 <= target < "
            "{}, or ignore_index {})",
            bad.value_or(0), x.size(1), describe(x), x.size(1), o.ignore_index);
      },
      [&] { ops::cuda::cross_entropy_forward(x, target, o.ignore_index, o.label_smoothing, loss, lse); });
  if (autograd::needs_grad({x})) {
    autograd::record("CrossEntropyBackward", {x}, {loss}, {x, target, lse},
                     [o](autograd::BackwardContext& c) {
                       const Tensor& xs = c.saved[0];
                       if (GradMode::is_enabled())
                         return TensorList{cross_entropy_grad_ops(c.grad(), xs, c.saved[1], o)};
                       // Note [Gradient over the logits]: the logits are a language model's largest
                       // tensor, and nothing reads them after this backward: held by nobody else, they
                       // take their gradient in place (element by element in both kernels), as llm.c
                       // does, and the step's peak loses one (N, C) buffer.
                       const bool over = c.releases_saved && xs.storage().use_count() == 1;
                       Tensor dx = over ? xs.detach() : Tensor::empty(xs.sizes(), xs.options());
                       const Tensor g = c.grad().contiguous();
                       ops::dispatch(
                           "cross_entropy_backward", xs,
                           [&] {
                             ops::cpu::cross_entropy_backward(g, xs, c.saved[1], c.saved[2], o.ignore_index,
                                                              o.label_smoothing, dx);
                           },
                           [&] {
                             ops::cuda::cross_entropy_backward(g, xs, c.saved[1], c.saved[2], o.ignore_index,
                                                               o.label_smoothing, dx);
                           });
                       return TensorList{dx};
                     });
  }
  return loss;
}

}  // namespace

Tensor cross_entropy(const Tensor& logits_in, const Tensor& target, const CrossEntropyOptions& o) {
  NABLA_CHECK(o.label_smoothing >= 0.0 && o.label_smoothing <= 1.0,
              "cross_entropy: expected label_smoothing in [0, 1], got {}", o.label_smoothing);
  // (N, C) logits take the fused kernels, which read 16-bit logits as they are and compute in
  // float32: autocast's float32 policy holds without the float32 copy.
  if (logits_in.defined() && logits_in.dim() <= 2) {
    const DType result = ops::autocast_dtype(ops::AutocastCategory::Float32, logits_in);
    return unbatched_or(logits_in, target, o.reduction, [&](const Tensor& x, const Tensor& t) {
      check_class_target("cross_entropy", x, t);
      return reduce_class_loss(fused_cross_entropy(x, t, o).to(result), t, o.ignore_index, o.reduction);
    });
  }
  // Autocast: float32 (as every loss).
  const Tensor logits = ops::autocast_one(ops::AutocastCategory::Float32, logits_in);
  return unbatched_or(logits, target, o.reduction, [&](const Tensor& x, const Tensor& t) {
    check_class_target("cross_entropy", x, t);
    const Tensor logp = log_softmax(x, 1);
    Tensor per = nll_pick("cross_entropy", logp, t, o.ignore_index);
    if (o.label_smoothing > 0.0) {
      // The mean over classes rather than sum / C: a float16 sum over a large vocabulary overflows.
      Tensor smooth = -mean(logp, {1});
      smooth = where(ne(t, static_cast<double>(o.ignore_index)), smooth, zeros({}, smooth.options()));
      per = per * (1.0 - o.label_smoothing) + smooth * o.label_smoothing;
    }
    return reduce_class_loss(per, t, o.ignore_index, o.reduction);
  });
}

Tensor nll_loss(const Tensor& logp_in, const Tensor& target, const NllLossOptions& o) {
  // Autocast: float32.
  const Tensor logp = ops::autocast_one(ops::AutocastCategory::Float32, logp_in);
  return unbatched_or(logp, target, o.reduction, [&](const Tensor& x, const Tensor& t) {
    check_class_target("nll_loss", x, t);
    return reduce_class_loss(nll_pick("nll_loss", x, t, o.ignore_index), t, o.ignore_index, o.reduction);
  });
}

Tensor mse_loss(const Tensor& input_in, const Tensor& target_in, const MseLossOptions& o) {
  // Autocast: float32.
  const auto [input, target] = ops::autocast(ops::AutocastCategory::Float32, {input_in, target_in});
  check_same_shape("mse_loss", input, target);
  const Tensor diff = input - target;
  return reduce_loss(diff * diff, o.reduction);
}

Tensor binary_cross_entropy_with_logits(const Tensor& logits_in, const Tensor& target_in,
                                        const BceWithLogitsOptions& o_in) {
  // Autocast: float32 (pos_weight too).
  const auto [logits, target, pos_weight] =
      ops::autocast(ops::AutocastCategory::Float32, {logits_in, target_in, o_in.pos_weight});
  BceWithLogitsOptions o = o_in;
  o.pos_weight = pos_weight;
  const char* op = "binary_cross_entropy_with_logits";
  check_same_shape(op, logits, target);
  const Tensor& pw = o.pos_weight;
  if (pw.defined()) {
    ops::check_same_device(op, {logits, pw});
    NABLA_CHECK(pw.is_floating_point(), "{}: expected a floating-point pos_weight, got {}", op, describe(pw));
    const Shape joint = broadcast_shapes(logits.sizes(), pw.sizes(), op);
    NABLA_CHECK(joint == logits.sizes(), "{}: pos_weight {} must broadcast to the logits {}", op,
                describe(pw), describe(logits));
  }
  Tensor per;
  {
    NoGradGuard no_grad;
    const Tensor sp = softplus_neg(logits);
    per = pw.defined() ? (1.0 - target) * logits + (1.0 + (pw - 1.0) * target) * sp
                       : (1.0 - target) * logits + sp;
  }
  if (autograd::needs_grad({logits, target, pw})) {
    autograd::record(
        op, {logits, target, pw}, {per}, /*save=*/{logits, target, pw}, [](autograd::BackwardContext& ctx) {
          const Tensor &g = ctx.grad(), &x = ctx.saved[0], &t = ctx.saved[1], &w = ctx.saved[2];
          TensorList grads(3);
          if (ctx.needs(0)) {
            // d/dx = (1 - t) - (1 + (w - 1) t) sigmoid(-x); without w, sigmoid(x) - t.
            grads[0] =
                w.defined() ? g * ((1.0 - t) - (1.0 + (w - 1.0) * t) * sigmoid(-x)) : g * (sigmoid(x) - t);
          }
          if (ctx.needs(1)) {
            grads[1] = w.defined() ? g * ((w - 1.0) * softplus_neg(x) - x) : g * -x;
          }
          if (ctx.needs(2)) grads[2] = sum_to(g * t * softplus_neg(x), w.sizes());
          return grads;
        });
  }
  return reduce_loss(per, o.reduction);
}

}  // namespace nabla
