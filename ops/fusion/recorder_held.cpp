#include <algorithm>
#include <utility>

#include "nabla/core/cuda/stream.h"
#include "nabla/core/dispatch.h"
#include "nabla/ops/fusion/recorder.h"

// The recorder's held launches: a batch norm's launch waits for the next flush, so that the ReLU
// after it (and, in the backward, the ReLU's mask) can fold into its kernels. The rest of the
// Recorder's members are in recorder.cpp and recorder_pieces.cpp.

namespace nabla::ops::fusion {

// Note [Batch norm and its ReLU]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A training batch norm's kernel can apply the ReLU that follows it (relu(bn(x)), as every
// residual block writes it), and its backward can mask the gradient by that ReLU while it reads
// it; written plainly, the two run apart: the batch norm writes bn(x), a kernel reads it and
// writes the ReLU, and in the backward a kernel writes the masked gradient for the batch norm
// to read. The recorder folds them where the values allow it:
//  - forward: the batch norm's launch is held (hold), so that the region recorded after it may
//    read its output. At the flush, if that output's one reader is a ReLU and nothing else holds
//    it (not the caller, not autograd), the batch norm writes the ReLU's result itself and the
//    ReLU leaves the region (Region::detach); bn(x) is never written. An in-place relu_ of
//    the output before anything read it has the batch norm write the ReLU in place
//    (fold_relu_in_place). relu(bn(x) + z), the residual block's end, folds the same way when
//    z is in memory already and the sum is read by nothing else: the batch norm's kernel adds z
//    and applies the ReLU. Otherwise it runs as recorded. The values of relu(bn(x)) are the same
//    bit for bit (the ReLU of a rounded value is the rounded ReLU); relu(bn(x) + z) is rounded
//    once where the ops round bn(x) and then the sum, so it may differ in the last bit: it is
//    batch_norm_add_relu's value.
//  - backward: the batch norm's node, told the forward took the ReLU in, asks whether its
//    incoming gradient is a held threshold_backward(dy, relu_out) (relu_backward_parts) and then
//    runs its fused backward on dy, masking as the ReLU would (from x, bit for bit: Note [The
//    ReLU's mask from x] in ops/cuda/batch_norm/batch_norm.cu); the masked gradient, which
//    nobody reads any more, is dropped by the planner. Otherwise its backward reads the masked
//    gradient, whose mask applied again changes nothing.
// A held launch runs at the next flush, before the region, so it is always in program order:
// the region recorded after it is the only thing that could read its output before then.
bool Recorder::hold(HeldLaunch launch) {
  if (flushing_ || nabla::detail::t_dispatch_depth > 0 || !launch.out.is_cuda()) return false;
  flush();
  held_ = std::move(launch);
  held_relu_ = false;
  device_ = held_->out.device();
  stream_ = nabla::cuda::current_stream(device_.index);
  return true;
}

bool Recorder::fold_relu_in_place(const Tensor& t) {
  // Nothing recorded since the launch may read t's values before the ReLU.
  if (flushing_ || !held_ || held_relu_ || !region_.empty() || held_->out.impl() != t.impl()) return false;
  held_relu_ = true;
  ++stats_.folded_relus;
  return true;
}

// The op reading value v, when exactly one op reads it once; -1 otherwise.
int Recorder::only_reader(int v) const {
  int readers = 0, reader = -1;
  for (size_t o = 0; o < region_.ops().size(); ++o) {
    const Op& op = region_.ops()[o];
    const auto n = std::count(op.args.begin(), op.args.end(), v);
    readers += static_cast<int>(n);
    if (n > 0) reader = static_cast<int>(o);
  }
  return readers == 1 ? reader : -1;
}

// The ReLU op reading v alone, laid out as v, whose result someone holds: its result's tensor;
// undefined otherwise.
Tensor Recorder::relu_reading(int v) const {
  const int o = only_reader(v);
  if (o < 0) return {};
  const Op& op = region_.op(o);
  const Value &in = region_.value(v), &out = region_.value(op.result);
  if (op.kind != OpKind::Unary || op.unary != UnaryOp::Relu || out.dtype != in.dtype ||
      out.sizes != in.sizes || out.strides != in.strides) {
    return {};
  }
  return tensor_in(region_, slots_, op.result);
}

void Recorder::run_held() {
  HeldLaunch launch = std::move(*held_);
  held_.reset();
  bool relu = std::exchange(held_relu_, false);
  Tensor residual;
  const int t = relu ? -1 : result_of(launch.out);
  // Held by launch.out and the region's input slot, and by nothing else.
  const bool unheld = t >= 0 && region_.value(t).producer < 0 && launch.out.impl_ptr().use_count() == 2 &&
                      launch.out.storage().use_count() == 1;
  Tensor dst = launch.out;
  int relu_value = -1;
  if (unheld) {
    if (Tensor r = relu_reading(t); r.defined()) {
      relu_value = region_.op(only_reader(t)).result;
      dst = std::move(r);
    } else if (const int o = only_reader(t); o >= 0 && launch.takes_residual) {
      // relu(t + z), the sum read by nothing else, z in memory already and laid out as t.
      const Op& add = region_.op(o);
      const int z = add.args[0] == t ? add.args[1] : add.args[0];
      const Value &tv = region_.value(t), &zv = region_.value(z), &sum = region_.value(add.result);
      const Slot& sum_slot = slots_[static_cast<size_t>(add.result)];
      const bool fits = add.kind == OpKind::Binary && add.binary == BinaryOp::Add && add.alpha == 1.0 &&
                        z != t && zv.producer < 0 && slots_[static_cast<size_t>(z)].tensor.defined() &&
                        zv.dtype == tv.dtype && zv.sizes == tv.sizes && zv.strides == tv.strides &&
                        sum.dtype == tv.dtype && sum.sizes == tv.sizes && sum.strides == tv.strides &&
                        sum_slot.impl.expired() && sum_slot.storage.expired();
      if (fits) {
        if (Tensor r = relu_reading(add.result); r.defined()) {
          relu_value = region_.op(only_reader(add.result)).result;
          residual = slots_[static_cast<size_t>(z)].tensor;
          dst = std::move(r);
        }
      }
    }
  }
  if (relu_value >= 0) {
    // The ReLU's result is written by the launch: an input of the region now, held like the
    // others (through the caller's tensor where it is alive, so that recompute() still finds it).
    // A sum it read is then read by nothing, and the planner drops it.
    region_.detach(relu_value);
    Slot& slot = slots_[static_cast<size_t>(relu_value)];
    std::shared_ptr<TensorImpl> impl = slot.impl.lock();
    slot.tensor = impl ? Tensor(std::move(impl)) : dst;
    relu = true;
    ++stats_.folded_relus;
  }
  launch.out = Tensor();
  const nabla::cuda::StreamGuard on(stream_);
  launch.run(dst, relu, residual);
}

std::optional<std::pair<Tensor, Tensor>> Recorder::relu_backward_parts(const Tensor& grad) {
  if (flushing_ || !grad.defined()) return std::nullopt;
  const int v = result_of(grad);
  if (v < 0 || region_.value(v).producer < 0) return std::nullopt;
  const Op& op = region_.op(region_.value(v).producer);
  if (op.kind != OpKind::Binary || op.binary != BinaryOp::ThresholdBackward) return std::nullopt;
  Tensor dy = tensor_in(region_, slots_, op.args[0]);
  Tensor y = tensor_in(region_, slots_, op.args[1]);
  if (!dy.defined() || !y.defined() || dy.sizes() != grad.sizes() || y.sizes() != grad.sizes())
    return std::nullopt;
  ++stats_.folded_relus;
  return std::make_pair(std::move(dy), std::move(y));
}

}  // namespace nabla::ops::fusion
