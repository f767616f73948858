#include "nabla/apps/train_support/oom_split.h"

#include <fmt/format.h>

#include <algorithm>
#include <utility>

#include "nabla/core/cuda/memory.h"
#include "nabla/core/error.h"
#include "nabla/core/logging.h"
#include "nabla/ops/elementwise.h"

namespace nabla::train_support {

std::vector<std::pair<int64_t, int64_t>> micro_batch_ranges(int64_t batch, int split) {
  NABLA_CHECK(batch >= 1 && split >= 1 && split <= batch,
              "micro_batch_ranges: expected 1 <= split <= batch, got batch {} and split {}", batch, split);
  std::vector<std::pair<int64_t, int64_t>> ranges;
  const int64_t base = batch / split, larger = batch % split;
  int64_t start = 0;
  for (int i = 0; i < split; ++i) {
    const int64_t rows = base + (i < larger ? 1 : 0);
    ranges.emplace_back(start, start + rows);
    start += rows;
  }
  return ranges;
}

OomSplitter::OomSplitter(std::function<void()> zero_grad, OomSplitOptions options)
    : zero_grad_(std::move(zero_grad)), options_(options), split_(options.initial_split) {
  NABLA_CHECK(zero_grad_ != nullptr, "OomSplitter: expected a zero_grad callback, got an empty function");
  NABLA_CHECK(split_ >= 1, "OomSplitter: initial_split must be at least 1, got {}", split_);
}

Tensor OomSplitter::run_split(const Tensor& input, const Tensor& target, const MicroStep& micro_step,
                              int split) const {
  const int64_t batch = input.size(0);
  if (split == 1) return micro_step(input, target, 1.0);  // the common case: no views, weight exactly 1
  Tensor total;
  for (auto [start, end] : micro_batch_ranges(batch, split)) {
    const int64_t rows = end - start;
    // For a mean-reduced loss, weighting each micro-batch's mean by its share of the batch makes
    // the accumulated gradient the batch mean's gradient, even when the micro-batches differ in size.
    const double weight = static_cast<double>(rows) / static_cast<double>(batch);
    Tensor loss = micro_step(input.narrow(0, start, rows),
                             target.defined() ? target.narrow(0, start, rows) : target, weight);
    NABLA_CHECK(loss.defined(),
                "OomSplitter: the micro-step returned an undefined loss; return the weighted loss");
    total = total.defined() ? total + loss : loss;
  }
  return total;
}

Tensor OomSplitter::run_step(const Tensor& input, const Tensor& target, const MicroStep& micro_step) {
  NABLA_CHECK(input.defined() && input.dim() >= 1 && input.size(0) >= 1,
              "OomSplitter::run_step: expected an input with a batch dimension of at least one sample");
  NABLA_CHECK(!target.defined() || (target.dim() >= 1 && target.size(0) == input.size(0)),
              "OomSplitter::run_step: input and target must have the same batch size (dim 0), got {} and {}",
              input.size(0), target.defined() && target.dim() >= 1 ? target.size(0) : -1);
  const int64_t step = step_++;
  const int64_t batch = input.size(0);
  while (true) {
    const int split = static_cast<int>(std::min<int64_t>(split_, batch));
    try {
      return run_split(input, target, micro_step, split);
    } catch (const OutOfMemoryError& e) {
      // The failed attempt's tensors are gone (unwound); its gradients are half accumulated.
      zero_grad_();
      if (options_.device.is_cuda()) cuda::empty_cache();  // give the failed attempt's blocks back
      if (split >= batch) {
        throw OutOfMemoryError(fmt::format(
            "--oom-policy split: step {} does not fit even as {} micro-batches of one sample each: {} "
            "Reduce the memory a sample needs (smaller inputs, --amp, --channels-last, gradient "
            "checkpointing) or use a device with more memory.",
            step, batch, e.what()));
      }
      const int new_split = static_cast<int>(std::min<int64_t>(int64_t{2} * split, batch));
      NABLA_LOG_WARN(
          "out of memory at step {} (batch {} in {} micro-batch(es)); retrying the same batch as {} "
          "micro-batches with gradient accumulation, and keeping that split for the following steps",
          step, batch, split, new_split);
      events_.push_back(
          {.step = step, .batch_size = batch, .old_split = split, .new_split = new_split, .error = e.what()});
      split_ = std::max(split_, new_split);
    }
  }
}

std::vector<OomSplitEvent> OomSplitter::take_new_events() {
  std::vector<OomSplitEvent> fresh(events_.begin() + static_cast<std::ptrdiff_t>(events_taken_),
                                   events_.end());
  events_taken_ = events_.size();
  return fresh;
}

}  // namespace nabla::train_support
