// OomSplitter: `--oom-policy split`. A training step that runs out of memory is not lost: the
// partial gradients are zeroed, the CUDA allocator's cache is freed, and the same batch is run
// again as 2, 4, ... micro-batches (split along dim 0) whose gradients accumulate. Each
// micro-batch's loss is weighted by its share of the batch (micro size / batch size), so for a
// mean-reduced loss the accumulated gradient equals the full batch's, and the optimizer sees the
// same effective batch and the same gradient (BatchNorm aside: its statistics are per
// micro-batch). The split factor is kept for the following steps, since a batch that did not fit
// once will not fit next time either; each increase is logged and recorded as an event the
// trainer writes to its metrics.
//
//   OomSplitter splitter([&] { opt.zero_grad(); }, {.device = device});
//   opt.zero_grad();
//   Tensor loss = splitter.run_step(images, labels, [&](const Tensor& x, const Tensor& y, double w) {
//     Tensor l = cross_entropy(model.forward(x), y) * w;
//     l.backward();
//     return l.detach();
//   });
//   opt.step();
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "nabla/core/device.h"
#include "nabla/core/tensor.h"

namespace nabla::train_support {

// One increase of the split factor.
struct OomSplitEvent {
  int64_t step = 0;        // the run_step call (0-based) that ran out of memory
  int64_t batch_size = 0;  // of that step
  int old_split = 1;
  int new_split = 2;
  std::string error;  // the OutOfMemoryError's message
};

struct OomSplitOptions {
  Device device = Device::cpu();  // where the step runs: on CUDA, the cache is freed before a retry
  int initial_split = 1;          // e.g. restored from a checkpoint, or from --oom-policy split:4
};

class OomSplitter {
 public:
  // Forward and backward of one micro-batch. The loss it backpropagates must be multiplied by
  // `weight`; it returns that weighted loss, detached (it is summed into run_step's result).
  using MicroStep = std::function<Tensor(const Tensor& input, const Tensor& target, double weight)>;

  // `zero_grad` clears the gradients that a failed attempt left half-accumulated.
  explicit OomSplitter(std::function<void()> zero_grad, OomSplitOptions options = {});

  // Runs forward+backward of the batch (input and target split along dim 0, which must agree) as
  // split() micro-batches, raising the split on OutOfMemoryError until the step fits. The caller
  // zeroes gradients before and steps the optimizer after. Returns the summed weighted loss (the
  // batch's mean loss for a mean-reduced loss). Throws OutOfMemoryError, explaining, when even
  // micro-batches of one sample do not fit; other errors pass through unchanged.
  Tensor run_step(const Tensor& input, const Tensor& target, const MicroStep& micro_step);

  // Micro-batches a full batch is split into now (a smaller batch uses at most its size).
  int split() const { return split_; }
  int64_t steps() const { return step_; }
  const std::vector<OomSplitEvent>& events() const { return events_; }
  // The events recorded since the last call, for a metrics writer.
  std::vector<OomSplitEvent> take_new_events();

 private:
  Tensor run_split(const Tensor& input, const Tensor& target, const MicroStep& micro_step, int split) const;

  std::function<void()> zero_grad_;
  OomSplitOptions options_;
  int split_;
  int64_t step_ = 0;
  std::vector<OomSplitEvent> events_;
  size_t events_taken_ = 0;
};

// The [start, end) row ranges of `batch` rows cut into `split` nearly equal micro-batches (the
// first ones one row larger when it does not divide). For tests and logs.
std::vector<std::pair<int64_t, int64_t>> micro_batch_ranges(int64_t batch, int split);

}  // namespace nabla::train_support
