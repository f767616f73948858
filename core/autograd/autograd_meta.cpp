#include <atomic>

#include "nabla/core/autograd/grad_mode.h"
#include "nabla/core/autograd/node.h"
#include "nabla/core/autograd/saved_version.h"

namespace nabla {

namespace {
thread_local bool grad_mode_enabled = true;
std::atomic<uint64_t> next_sequence_nr{0};
}  // namespace

bool GradMode::is_enabled() {
  return grad_mode_enabled;
}
void GradMode::set_enabled(bool enabled) {
  grad_mode_enabled = enabled;
}

namespace autograd {

Node::Node() : sequence_nr(next_sequence_nr.fetch_add(1, std::memory_order_relaxed)) {}

SavedTensor::SavedTensor(const Tensor& t) {
  if (!t.defined()) return;
  data_ = t.detach();
  saved_version_ = t.version();
  requires_grad_ = t.requires_grad();
  if (!requires_grad_) return;
  if (t.is_leaf()) {
    leaf_ = t.impl_ptr();
  } else {
    grad_fn_ = t.grad_fn();
    output_nr_ = t.output_nr();
  }
}

SavedTensor::SavedTensor(const Tensor& t, std::shared_ptr<const Recompute> recompute) : SavedTensor(t) {
  if (!recompute || !t.defined()) return;
  recompute_ = std::move(recompute);
  data_ = Tensor();  // the buffer is let go: nobody may need to write it
}

void SavedTensor::set_output_of(const std::shared_ptr<Node>& node, uint32_t output_nr) {
  requires_grad_ = true;
  leaf_.reset();
  grad_fn_.reset();
  output_node_ = node;
  output_nr_ = output_nr;
}

void SavedTensor::reset() {
  data_ = Tensor();
  recompute_.reset();
  grad_fn_.reset();
  released_ = true;
}

Tensor SavedTensor::unpack(const std::string& node_name, size_t index) const {
  NABLA_CHECK(
      !released_,
      "{}: trying to run backward through this part of the graph a second time, but its saved tensors "
      "were freed by the first backward; pass retain_graph=true to the first backward() to keep them",
      node_name);
  if (recompute_) return with_history(recompute_->run(node_name, index));
  if (!data_.defined()) return data_;
  check_saved_version(node_name, index, data_, saved_version_);
  return with_history(data_);
}

void check_saved_version(const std::string& node_name, size_t index, const Tensor& t,
                         uint32_t saved_version) {
  NABLA_CHECK(
      t.version() == saved_version,
      "{}: saved tensor #{} ({}) was modified by an in-place operation after it was saved for backward "
      "(version {} when saved, {} now); the gradient would be wrong. Use an out-of-place op, or clone() "
      "the tensor before modifying it",
      node_name, index, describe(t), saved_version, t.version());
}

Tensor SavedTensor::with_history(const Tensor& data) const {
  // Without grad mode (the usual backward) the plain data is all the formulas need.
  if (!GradMode::is_enabled() || !requires_grad_) return data;
  if (auto leaf = leaf_.lock()) return Tensor(leaf);
  std::shared_ptr<Node> fn = grad_fn_ ? grad_fn_ : output_node_.lock();
  if (!fn) return data;
  Tensor result = data.detach();
  auto& meta = result.impl()->autograd_meta();
  meta.requires_grad = true;
  meta.grad_fn = std::move(fn);
  meta.output_nr = output_nr_;
  return result;
}

}  // namespace autograd
}  // namespace nabla
