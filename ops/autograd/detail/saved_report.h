// Internal (ops). NABLA_SAVED_REPORT=1: what a step keeps for its backward and where its memory
// peaks, printed to stderr at the end of every backward pass. Finding why a model's step holds
// more memory than another framework's starts here: the saved tensors by node (with their dtype
// and shape), the values kept as recipes instead (Note [Recomputed saved values]), and the node
// during which the device's allocated bytes peaked.
#pragma once

#include <string>

#include "nabla/core/tensor.h"

namespace nabla::autograd::detail {

// Whether saves are noted: NABLA_SAVED_REPORT (read once), unless a test set it.
bool saved_report_enabled();
void set_saved_report(bool enabled);

// autograd::record: `node` saves `t`, as its buffer or (recipe) as the ops computing it again.
void note_saved(const char* node, const Tensor& t, bool recipe);

// The engine, around one backward pass on `device`: the saved set noted since the last pass that
// is still alive (each storage counted once, for the first node that saved it), then after each
// node whether the device's peak grew while it ran; the report prints when the pass ends. Only the
// outermost pass reports: a checkpointed segment's backward runs inside another's node.
class BackwardReport {
 public:
  explicit BackwardReport(Device device);
  ~BackwardReport();  // prints the report (stderr), unless an exception is leaving the pass
  BackwardReport(const BackwardReport&) = delete;
  BackwardReport& operator=(const BackwardReport&) = delete;
  void after_node(const std::string& node);

 private:
  void print() const;
  bool outermost_;
  int exceptions_;
};

}  // namespace nabla::autograd::detail
