// batch_norm, batch_norm_relu and batch_norm_add_relu front ends.
//
// x is handed to the backend dense, in contiguous or channels_last order (a channels_last x is
// read in place and gives a channels_last y); anything else is copied first. The running stats
// are updated by the backend in place, outside autograd, and their version is bumped so that a
// node that saved them notices. Training runs through the family's seam (ops/detail/batch_norm.h):
// the backend's forward returns what its backward needs, and one node keeps it; which
// implementation ran is the backend's business (the CUDA route table is
// ops/cuda/batch_norm/routes.cpp). The eval backward is written with ops (a per-channel scale).
//
// The fused variants run as one pass where the backend has a fused route for x (fuses_relu);
// everywhere else they compose batch_norm, add and relu, so every path gives the same values.
#include "nabla/ops/norm.h"

#include <cmath>

#include "nabla/core/deferred.h"
#include "nabla/ops/autograd/detail/no_double_backward.h"
#include "nabla/ops/autograd/function.h"
#include "nabla/ops/detail/autocast_policy.h"
#include "nabla/ops/detail/batch_norm.h"
#include "nabla/ops/detail/dispatch.h"
#include "nabla/ops/detail/layer_checks.h"
#include "nabla/ops/elementwise.h"
#include "nabla/ops/factory.h"
#include "nabla/ops/fusion/recorder.h"
#include "nabla/ops/reduce.h"

namespace nabla {

using autograd::BackwardContext;
using ops::BatchNormBackend;
using ops::BatchNormGrads;
using ops::BatchNormInputs;
using ops::BatchNormSaved;
using ops::BatchNormStats;

namespace {

// Weight, bias and running stats: float32 for 16-bit inputs (as cuDNN wants), x's dtype otherwise.
DType param_dtype(DType x) {
  return x == kFloat16 || x == kBFloat16 ? kFloat32 : x;
}

void check_channel_tensor(const char* op, const Tensor& t, const char* name, const Tensor& x) {
  if (!t.defined()) return;
  const DType pd = param_dtype(x.dtype());
  NABLA_CHECK(t.dim() == 1 && t.size(0) == x.size(1),
              "{}: expected {} of shape [{}] (one value per channel of input {}), got {}", op, name,
              x.size(1), describe(x), describe(t));
  NABLA_CHECK(t.dtype() == pd, "{}: expected {} of dtype {} for input {}, got {}", op, name, dtype_name(pd),
              describe(x), describe(t));
  NABLA_CHECK(t.device() == x.device(), "{}: expected {} on {} like the input, got {}", op, name,
              x.device().str(), describe(t));
}

}  // namespace

void ops::validate_batch_norm(const char* op, const Tensor& x, const Tensor& weight, const Tensor& bias,
                              const Tensor& running_mean, const Tensor& running_var,
                              const BatchNormOptions& options) {
  ops::check_defined(op, x, "input");
  NABLA_CHECK(x.is_floating_point(), "{}: expected a floating-point input, got {}", op, describe(x));
  NABLA_CHECK(x.dim() >= 2, "{}: expected an input of shape (N, C) or (N, C, *), got {}", op, describe(x));
  NABLA_CHECK(options.eps > 0 && std::isfinite(options.eps), "{}: expected eps > 0, got {}", op, options.eps);
  NABLA_CHECK(std::isfinite(options.momentum), "{}: expected a finite momentum, got {}", op,
              options.momentum);
  NABLA_CHECK(running_mean.defined() == running_var.defined(),
              "{}: expected both running_mean and running_var, or neither; got {} and {}", op,
              describe(running_mean), describe(running_var));
  NABLA_CHECK(options.training || running_mean.defined(),
              "{}: running_mean and running_var must be defined in eval mode (training = false)", op);
  check_channel_tensor(op, weight, "weight", x);
  check_channel_tensor(op, bias, "bias", x);
  check_channel_tensor(op, running_mean, "running_mean", x);
  check_channel_tensor(op, running_var, "running_var", x);
  for (const Tensor* t : {&running_mean, &running_var}) {
    NABLA_CHECK(!t->defined() || t->is_contiguous(),
                "{}: running stats are updated in place and must be contiguous, got {}", op, describe(*t));
  }
  if (options.training) {
    const int64_t per_channel = x.size(1) == 0 ? 0 : x.numel() / x.size(1);
    NABLA_CHECK(per_channel > 1, "{}: expected more than 1 value per channel when training, got input {}", op,
                describe(x));
  }
}

namespace {

bool is_channels_last(const Tensor& x) {
  return x.dim() == 4 && !x.is_contiguous() && x.is_contiguous(MemoryFormat::ChannelsLast);
}

// x in an order the kernels read in place. Channels_last-ordered views (say a strided slice of
// an NHWC tensor) are copied to channels_last, so that the output keeps the input's layout.
Tensor dense_input(const Tensor& x) {
  if (x.is_contiguous() || is_channels_last(x)) return x;
  const bool nhwc = x.dim() == 4 && x.stride(1) < x.stride(3) && x.stride(1) <= x.stride(2);
  return x.contiguous(nhwc ? MemoryFormat::ChannelsLast : MemoryFormat::Contiguous);
}

MemoryFormat format_of(const Tensor& x) {
  return is_channels_last(x) ? MemoryFormat::ChannelsLast : MemoryFormat::Contiguous;
}

Tensor empty_like_layout(const Tensor& x) {
  return Tensor::empty(x.sizes(), {.dtype = x.dtype(), .device = x.device(), .memory_format = format_of(x)});
}

Tensor per_channel_empty(const Tensor& x) {
  return Tensor::empty({x.size(1)}, {.dtype = param_dtype(x.dtype()), .device = x.device()});
}

Tensor contiguous_or_undefined(const Tensor& t) {
  return t.defined() ? t.contiguous() : t;
}

// Shape (1, C, 1, ...) to broadcast a (C) tensor against x.
Shape channel_shape(const Tensor& x) {
  Shape s(x.dim(), 1);
  s[1] = x.size(1);
  return s;
}

Shape non_channel_dims(const Tensor& x) {
  Shape dims = {0};
  for (int64_t d = 2; d < x.dim(); ++d) dims.push_back(d);
  return dims;
}

void bump_running_stats(const Tensor& running_mean, const Tensor& running_var) {
  if (!running_mean.defined()) return;
  running_mean.bump_version();
  running_var.bump_version();
}

// The training-mode backward: dx, dweight, dbias from one backend call.
TensorList batch_norm_backward(const Tensor& grad, const BatchNormSaved& saved, double eps,
                               const std::vector<bool>& needs) {
  const Tensor& x = saved.x;
  BatchNormGrads g;
  {
    NoGradGuard no_grad;
    const Tensor dy = grad.contiguous(format_of(x));
    g.dx = needs[0] ? empty_like_layout(x) : Tensor();
    g.dweight = needs[1] ? per_channel_empty(x) : Tensor();
    g.dbias = needs[2] ? per_channel_empty(x) : Tensor();
    ops::on_batch_norm_backend("batch_norm_backward", x,
                               [&](const BatchNormBackend& b) { b.backward(dy, saved, eps, g); });
  }
  autograd::refuse_double_backward("batch_norm_backward", {grad, x, saved.weight},
                                   {g.dx, g.dweight, g.dbias});
  return {g.dx, g.dweight, g.dbias};
}

bool hold_batch_norm(const BatchNormInputs& in, const Tensor& y, const BatchNormStats& stats,
                     const BatchNormOptions& options);

Tensor batch_norm_training(const Tensor& x, const Tensor& weight, const Tensor& bias,
                           const Tensor& running_mean, const Tensor& running_var,
                           const BatchNormOptions& options) {
  Tensor y = empty_like_layout(x);
  const BatchNormStats stats{per_channel_empty(x), per_channel_empty(x)};
  const BatchNormInputs in{x, weight, bias, running_mean, running_var};
  if (hold_batch_norm(in, y, stats, options)) return y;
  const BatchNormSaved saved =
      ops::on_batch_norm_backend("batch_norm_forward", x, [&](const BatchNormBackend& b) {
        return b.forward(in, Tensor(), /*relu=*/false, y, stats, options.momentum, options.eps);
      });
  bump_running_stats(running_mean, running_var);
  ops::record_batch_norm(x, Tensor(), weight, bias, y, saved, options.eps);
  return y;
}

Tensor batch_norm_eval(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                       const Tensor& running_var, double eps) {
  Tensor y = empty_like_layout(x);
  const BatchNormInputs in{x, weight, bias, running_mean, running_var};
  ops::on_batch_norm_backend("batch_norm_inference", x,
                             [&](const BatchNormBackend& b) { b.inference(in, y, eps); });
  if (autograd::needs_grad({x, weight, bias})) {
    // y = (x - running_mean) * invstd * weight + bias: a per-channel affine map of x.
    autograd::record("BatchNormEvalBackward", {x, weight, bias}, {y}, {x, weight, running_mean, running_var},
                     [eps](BackwardContext& ctx) {
                       const Tensor& x = ctx.saved[0];
                       const Tensor& w = ctx.saved[1];
                       const Shape cs = channel_shape(x), dims = non_channel_dims(x);
                       const DType pd = param_dtype(x.dtype());
                       // In x's layout, so that dx (which follows g's) keeps it.
                       const Tensor g = ctx.grad().contiguous(format_of(x)).to(pd);
                       const Tensor invstd = rsqrt(ctx.saved[3] + eps).view(cs);
                       TensorList grads(3);
                       if (ctx.needs(0)) grads[0] = g * (w.defined() ? invstd * w.view(cs) : invstd);
                       if (ctx.needs(1))
                         grads[1] = sum(g * ((x.to(pd) - ctx.saved[2].view(cs)) * invstd), dims);
                       if (ctx.needs(2)) grads[2] = sum(g, dims);
                       return grads;
                     });
  }
  return y;
}

// ---- fused path: relu(bn(x) [+ z]) in one pass, where the backend has one -----------------

bool takes_fused_route(const Tensor& x, const BatchNormOptions& options) {
  return options.training && ops::batch_norm_backend_of(x.device()).fuses_relu(x);
}

// `grad` is taken by value (the engine hands its buffer over): when nothing else holds it, one
// of the results is written over it. The residual's gradient is the incoming one masked by the
// ReLU, and every element only goes from dy to mask * dy, a value any reader of dy masks to the
// same thing, so dz may alias dy whatever the kernel's order. For relu(bn(x)), dx goes over dy
// (each thread reads its elements before it writes them). Either way backward holds one activation-sized
// buffer less at this node, where the composed ops hold dy and the ReLU's gradient at once.
TensorList fused_backward(Tensor grad, const BatchNormSaved& saved, double eps) {
  BatchNormGrads g;
  {
    NoGradGuard no_grad;
    const Tensor& x = saved.x;
    const Tensor dy = grad.contiguous(format_of(x));  // grad itself, or a fresh copy
    // Writable when this is the only handle to its memory (and no graph is built through it).
    bool writable = false;
    if (!grad.requires_grad()) {
      grad = Tensor();
      writable = dy.impl_ptr().use_count() == 1 && dy.storage().use_count() == 1;
    }
    g.dresidual = saved.add ? (writable ? dy : empty_like_layout(x)) : Tensor();
    const bool dx_over_dy = !saved.add && writable;
    g.dx = dx_over_dy ? dy : empty_like_layout(x);
    g.dweight = per_channel_empty(x);
    g.dbias = per_channel_empty(x);
    ops::on_batch_norm_backend("batch_norm_fused_backward", x,
                               [&](const BatchNormBackend& b) { b.backward(dy, saved, eps, g); });
  }
  const char* name = saved.add ? "batch_norm_add_relu_backward" : "batch_norm_relu_backward";
  autograd::refuse_double_backward(name, {grad, saved.x, saved.weight},
                                   {g.dx, g.dresidual, g.dweight, g.dbias});
  return {g.dx, g.dresidual, g.dweight, g.dbias};
}

// Inside a compiled step, a training batch norm with an affine map, where the backend fuses a
// ReLU: the launch is held, so that a ReLU reading its output first folds into it, forward and
// backward (Note [Batch norm and its ReLU] in ops/fusion/recorder_held.cpp). The node is recorded now
// and learns at the launch what the forward saved; it keeps x, weight, bias and the statistics,
// what either forward's backward reads.
bool hold_batch_norm(const BatchNormInputs& in, const Tensor& y, const BatchNormStats& stats,
                     const BatchNormOptions& options) {
  if (ops::fusion::active_recorder() == nullptr || !in.x.is_cuda() || !in.weight.defined() ||
      !in.bias.defined() || !takes_fused_route(in.x, options)) {
    return false;
  }
  struct Launched {
    bool ran = false;
    uint8_t route = 0;
    bool relu = false;
  };
  auto launched = std::make_shared<Launched>();
  auto run = [in, stats, momentum = options.momentum, eps = options.eps, launched](
                 const Tensor& dst, bool relu, const Tensor& residual) {
    const BatchNormSaved saved = ops::on_batch_norm_backend(
        "batch_norm_forward", in.x,
        [&](const BatchNormBackend& b) { return b.forward(in, residual, relu, dst, stats, momentum, eps); });
    // relu(bn(x) + z) keeps its graph (the ReLU's node masks, the sum's node hands the gradient
    // to z): this node's backward is the plain one, which reads none of y.
    const bool folded = relu && !residual.defined();
    NABLA_ASSERT(!saved.reserve.defined() && (!folded || !saved.y.defined()),
                 "batch norm: a held launch's backward would need tensors its node does not keep");
    launched->route = saved.route;
    launched->relu = folded;
    launched->ran = true;
  };
  if (!ops::fusion::hold_launch({.out = y, .run = std::move(run), .takes_residual = true})) return false;
  bump_running_stats(in.running_mean, in.running_var);
  if (!autograd::needs_grad({in.x, in.weight, in.bias})) return true;
  const TensorList kept = {in.x, in.weight, in.bias, stats.mean, stats.invstd};
  autograd::record("BatchNormBackward", {in.x, in.weight, in.bias}, {y}, kept,
                   [eps = options.eps, launched](BackwardContext& ctx) {
                     // A backward through recorded ops alone can reach this node before any
                     // flush ran the launch: run it, so that what it did is known.
                     if (!launched->ran) flush_deferred();
                     NABLA_ASSERT(launched->ran,
                                  "batch norm: the held launch did not run before its backward");
                     const BatchNormSaved saved{.x = ctx.saved[0],
                                                .weight = ctx.saved[1],
                                                .bias = ctx.saved[2],
                                                .stats = {ctx.saved[3], ctx.saved[4]},
                                                .route = launched->route,
                                                .relu = launched->relu};
                     if (!saved.relu)
                       return batch_norm_backward(ctx.grad(), saved, eps, ctx.needs_input_grad);
                     // The forward took the ReLU in: its backward masks the gradient itself, so
                     // it reads the ReLU's incoming gradient where that is at hand, and the
                     // masked one, dropped here, is never computed. Otherwise it masks the masked
                     // gradient again, which changes nothing.
                     Tensor grad = std::move(ctx.grads[0]);
                     if (auto parts = ops::fusion::relu_backward_parts(grad)) grad = std::move(parts->first);
                     TensorList g = fused_backward(std::move(grad), saved, eps);
                     return TensorList{g[0], g[2], g[3]};
                   });
  return true;
}

// The fused forward (takes_fused_route(x) holds).
Tensor fused_forward(const Tensor& x, const Tensor& residual, const Tensor& weight, const Tensor& bias,
                     const Tensor& running_mean, const Tensor& running_var, const BatchNormOptions& options) {
  const TensorOptions params{.dtype = param_dtype(x.dtype()), .device = x.device()};
  const Tensor w = weight.defined() ? weight.contiguous() : ones({x.size(1)}, params);
  const Tensor b = bias.defined() ? bias.contiguous() : zeros({x.size(1)}, params);
  const Tensor z = residual.defined() ? residual.contiguous(format_of(x)) : Tensor();
  Tensor y = empty_like_layout(x);
  const BatchNormStats stats{per_channel_empty(x), per_channel_empty(x)};
  const BatchNormInputs in{x, w, b, running_mean, running_var};
  const BatchNormSaved saved =
      ops::on_batch_norm_backend("batch_norm_fused_forward", x, [&](const BatchNormBackend& backend) {
        return backend.forward(in, z, /*relu=*/true, y, stats, options.momentum, options.eps);
      });
  bump_running_stats(running_mean, running_var);
  ops::record_batch_norm(x, z, w, b, y, saved, options.eps);
  return y;
}

Tensor fused_batch_norm(const char* op, const Tensor& x_arg, const Tensor& residual, const Tensor& weight,
                        const Tensor& bias, Tensor& running_mean, Tensor& running_var,
                        const BatchNormOptions& options) {
  // Autocast: norm statistics (as batch_norm).
  const Tensor x_in = ops::autocast_one(ops::AutocastCategory::NormStatistics, x_arg);
  ops::validate_batch_norm(op, x_in, weight, bias, running_mean, running_var, options);
  if (residual.defined()) {
    NABLA_CHECK(residual.sizes() == x_in.sizes() && residual.dtype() == x_in.dtype() &&
                    residual.device() == x_in.device(),
                "{}: expected a residual of the input's shape, dtype and device ({}), got {}", op,
                describe(x_in), describe(residual));
  }
  if (takes_fused_route(x_in, options))
    return fused_forward(x_in, residual, weight, bias, running_mean, running_var, options);
  // The composed path: batch_norm's output (or the sum) is a fresh tensor that batch_norm's
  // backward does not save, so the ReLU overwrites it instead of allocating a third activation.
  Tensor y = batch_norm(x_in, weight, bias, running_mean, running_var, options);
  if (residual.defined()) y = y + residual;
  relu_(y);
  return y;
}

}  // namespace

Tensor batch_norm(const Tensor& x_arg, const Tensor& weight, const Tensor& bias, Tensor& running_mean,
                  Tensor& running_var, BatchNormOptions options) {
  // Autocast: norm statistics (x keeps its dtype; the statistics are float32 in the kernels).
  const Tensor x_in = ops::autocast_one(ops::AutocastCategory::NormStatistics, x_arg);
  ops::validate_batch_norm("batch_norm", x_in, weight, bias, running_mean, running_var, options);
  const Tensor x = dense_input(x_in);
  const Tensor w = contiguous_or_undefined(weight), b = contiguous_or_undefined(bias);
  if (options.training) return batch_norm_training(x, w, b, running_mean, running_var, options);
  return batch_norm_eval(x, w, b, running_mean, running_var, options.eps);
}

Tensor batch_norm_relu(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& running_mean,
                       Tensor& running_var, BatchNormOptions options) {
  return fused_batch_norm("batch_norm_relu", x, Tensor(), weight, bias, running_mean, running_var, options);
}

Tensor batch_norm_add_relu(const Tensor& x, const Tensor& residual, const Tensor& weight, const Tensor& bias,
                           Tensor& running_mean, Tensor& running_var, BatchNormOptions options) {
  return fused_batch_norm("batch_norm_add_relu", x, residual, weight, bias, running_mean, running_var,
                          options);
}

// The node keeps what the backend saved, its tensors as the node's saved tensors (version-checked
// and released with the node) and the rest by value, and hands it back to the backend unread.
void ops::record_batch_norm(const Tensor& x, const Tensor& residual, const Tensor& weight, const Tensor& bias,
                            const Tensor& y, const BatchNormSaved& saved, double eps) {
  const TensorList kept = {
      saved.x, saved.y, saved.weight, saved.bias, saved.stats.mean, saved.stats.invstd, saved.reserve};
  const auto restore = [route = saved.route, relu = saved.relu, add = saved.add](const TensorList& s) {
    return BatchNormSaved{.x = s[0],
                          .y = s[1],
                          .weight = s[2],
                          .bias = s[3],
                          .stats = {s[4], s[5]},
                          .reserve = s[6],
                          .route = route,
                          .relu = relu,
                          .add = add};
  };
  if (!saved.relu) {
    if (!autograd::needs_grad({x, weight, bias})) return;
    autograd::record("BatchNormBackward", {x, weight, bias}, {y}, kept, [eps, restore](BackwardContext& ctx) {
      return batch_norm_backward(ctx.grad(), restore(ctx.saved), eps, ctx.needs_input_grad);
    });
    return;
  }
  if (!autograd::needs_grad({x, residual, weight, bias})) return;
  autograd::record(saved.add ? "BatchNormAddReluBackward" : "BatchNormReluBackward",
                   {x, residual, weight, bias}, {y}, kept, [eps, restore](BackwardContext& ctx) {
                     return fused_backward(std::move(ctx.grads[0]), restore(ctx.saved), eps);
                   });
}

}  // namespace nabla
