// Public header (for custom autograd code). The pieces of the autograd graph.
//
// A differentiable op records a Node that holds what backward needs (SavedTensors) and one Edge
// per input: the input's own grad_fn, or the AccumulateGrad node of a leaf. The engine that
// walks this graph lives in ops/autograd (it adds gradients, which needs kernels); core only
// owns the data structures, so TensorImpl can point at them. See docs/design/tensor-and-autograd.md.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "nabla/core/tensor.h"

namespace nabla::autograd {

struct Edge {
  std::shared_ptr<Node> node;
  uint32_t input_nr = 0;  // which of node's gradient inputs this edge feeds
  bool valid() const { return node != nullptr; }
};

class Node : public std::enable_shared_from_this<Node> {
 public:
  Node();
  virtual ~Node() = default;
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  // grads[i] is the gradient of the forward's i-th output (undefined if none flowed there).
  // Returns one gradient per next edge (undefined where an input needs none).
  virtual TensorList apply(TensorList&& grads) = 0;
  virtual std::string name() const = 0;
  // Drops saved tensors after a backward pass without retain_graph.
  virtual void release_saved() {}

  std::vector<Edge> next_edges;
  uint32_t num_outputs = 1;  // how many forward outputs (gradient inputs) this node has
  // Creation order. The engine runs later nodes first, so gradients of the last layers (and the
  // DDP buckets that wait on them) are ready first.
  const uint64_t sequence_nr;
  // Hooks on the gradient of forward output i, run before apply() once that gradient is final.
  std::vector<std::pair<uint32_t, std::function<Tensor(const Tensor&)>>> pre_hooks;
};

// Note [Recomputed saved values] (ops/fusion/recompute.cpp): in a compiled step a saved pointwise
// value may be kept as the ops that compute it from other tensors instead of its buffer;
// unpacking runs them again.
class Recompute : public std::enable_shared_from_this<Recompute> {
 public:
  Recompute() = default;
  virtual ~Recompute() = default;
  Recompute(const Recompute&) = delete;
  Recompute& operator=(const Recompute&) = delete;
  // The value, computed again; `node_name` and `index` name it in errors.
  virtual Tensor run(const std::string& node_name, size_t index) const = 0;
};

// A tensor saved for backward. It keeps a detached alias of the data and the storage version at
// save time; unpack() fails loudly if the memory changed since. For create_graph (higher-order
// gradients) it also remembers where the tensor came from, so that unpacking under grad mode
// gives back a tensor with its history: a leaf is kept weakly (unpack returns the leaf itself),
// an op's input keeps its grad_fn, and an op's own output refers to its node weakly (a strong
// reference would be a cycle: node -> saved output -> node).
class SavedTensor {
 public:
  SavedTensor() = default;
  explicit SavedTensor(const Tensor& t);
  // Saved as `recompute` (when not null) instead of t's buffer; t gives the rest (its history).
  SavedTensor(const Tensor& t, std::shared_ptr<const Recompute> recompute);
  // Marks this as output `output_nr` of `node` (called by the node that saved it).
  void set_output_of(const std::shared_ptr<Node>& node, uint32_t output_nr);
  // `node_name` and `index` go into the error message if the tensor was modified in place.
  Tensor unpack(const std::string& node_name, size_t index) const;
  void reset();
  bool defined() const { return data_.defined() || recompute_ != nullptr; }

 private:
  // `data` as unpack gives it: with its history when grad mode is on (create_graph).
  Tensor with_history(const Tensor& data) const;

  Tensor data_;
  std::shared_ptr<const Recompute> recompute_;
  uint32_t saved_version_ = 0;
  bool released_ = false;
  bool requires_grad_ = false;
  std::weak_ptr<TensorImpl> leaf_;
  std::shared_ptr<Node> grad_fn_;
  std::weak_ptr<Node> output_node_;
  uint32_t output_nr_ = 0;
};

struct AutogradMeta {
  bool requires_grad = false;
  bool retains_grad = false;
  Tensor grad;
  std::shared_ptr<Node> grad_fn;
  uint32_t output_nr = 0;
  // The AccumulateGrad node of a leaf, shared by every graph that uses the leaf. Weak, because
  // that node points back at the leaf.
  std::weak_ptr<Node> grad_accumulator;
  std::vector<std::function<Tensor(const Tensor&)>> leaf_pre_hooks;
  std::vector<std::function<void(const Tensor&)>> post_accumulate_hooks;
  // Set on views of a tensor that requires grad: in-place writes through them are refused,
  // since the base's history would not see them.
  bool is_view_of_grad_tensor = false;
};

}  // namespace nabla::autograd
