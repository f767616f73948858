// Internal. The two node kinds the ops library creates: FunctionNode (an op's gradient lambda)
// and AccumulateGrad (adds a gradient into a leaf's .grad).
#pragma once

#include "nabla/ops/autograd/function.h"

namespace nabla::autograd {

namespace detail {
// Set by the engine while a node runs whose saved tensors it frees right after (no retain_graph):
// the node's BackwardContext::releases_saved.
inline thread_local bool t_releases_saved = false;
}  // namespace detail

struct TensorMeta {
  Shape sizes;
  DType dtype = kFloat32;
  Device device;
  bool defined = false;
  static TensorMeta of(const Tensor& t) {
    return t.defined() ? TensorMeta{t.sizes(), t.dtype(), t.device(), true} : TensorMeta{};
  }
};

class FunctionNode final : public Node {
 public:
  FunctionNode(const char* name, BackwardFn fn, std::vector<SavedTensor> saved,
               std::vector<bool> needs_input_grad, std::vector<TensorMeta> inputs,
               std::vector<TensorMeta> outputs);
  TensorList apply(TensorList&& grads) override;
  std::string name() const override { return name_; }
  void release_saved() override;
  void mark_saved_output(size_t saved_index, const std::shared_ptr<Node>& self, uint32_t output_nr) {
    saved_[saved_index].set_output_of(self, output_nr);
  }
  // A pointwise op's node (detail/pointwise_node.h): the engine runs it as soon as it is ready.
  bool pointwise = false;

 private:
  const char* name_;
  BackwardFn fn_;
  std::vector<SavedTensor> saved_;
  std::vector<bool> needs_input_grad_;
  std::vector<TensorMeta> inputs_;
  std::vector<TensorMeta> outputs_;
  bool released_ = false;
};

class AccumulateGrad final : public Node {
 public:
  explicit AccumulateGrad(const std::shared_ptr<TensorImpl>& leaf) : leaf_(leaf) {}
  TensorList apply(TensorList&& grads) override;
  std::string name() const override { return "AccumulateGrad"; }

 private:
  std::weak_ptr<TensorImpl> leaf_;
};

}  // namespace nabla::autograd
