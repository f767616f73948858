// The backward engine: a dependency-counted walk of the graph from the roots.
//
// 1. Count, for every node reachable from the roots, how many edges point at it.
// 2. Run nodes whose count reached zero, newest first (highest sequence_nr), leaf accumulators
//    before anything else, so leaf gradients (and DDP's buckets) are final as early as possible.
// 3. Each node's outputs are added into the input buffers of the nodes its edges name.
// Gradients for one node input are summed in its buffer before the node runs, which is what
// makes a leaf's gradient "final" when its AccumulateGrad runs.
#include "nabla/ops/autograd/engine.h"

#include <limits>
#include <queue>
#include <unordered_map>

#include "nabla/core/autocast.h"
#include "nabla/core/autograd/grad_mode.h"
#include "nabla/ops/autograd/function.h"
#include "nabla/ops/autograd/nodes.h"
#include "nabla/ops/elementwise.h"
#include "nabla/ops/factory.h"

namespace nabla::autograd {

namespace {

uint64_t priority(const Node* node) {
  return dynamic_cast<const AccumulateGrad*>(node) ? std::numeric_limits<uint64_t>::max() : node->sequence_nr;
}

// The callbacks queued during the outermost backward pass running on this thread.
thread_local std::vector<std::function<void()>>* current_callbacks = nullptr;

struct ReadyEntry {
  uint64_t priority;
  Node* node;
  bool operator<(const ReadyEntry& other) const { return priority < other.priority; }
};

}  // namespace

void queue_callback(std::function<void()> callback) {
  NABLA_CHECK(current_callbacks != nullptr,
              "autograd::queue_callback: no backward pass is running on this thread; call it from "
              "a gradient hook");
  current_callbacks->push_back(std::move(callback));
}

void backward(const TensorList& roots, const TensorList& root_grads, BackwardOptions options) {
  NABLA_CHECK(root_grads.empty() || root_grads.size() == roots.size(),
              "backward: {} gradients given for {} outputs", root_grads.size(), roots.size());
  std::vector<Edge> root_edges;
  TensorList initial;
  for (size_t i = 0; i < roots.size(); ++i) {
    const Tensor& root = roots[i];
    NABLA_CHECK(root.requires_grad(),
                "backward: the tensor ({}) does not require grad and has no grad_fn; did you forget "
                "requires_grad_(), or compute it under NoGradGuard?",
                describe(root));
    Tensor g = root_grads.empty() ? Tensor() : root_grads[i];
    if (!g.defined()) {
      NABLA_CHECK(root.numel() == 1,
                  "backward: a gradient can be implied only for one-element outputs; this output is {}. "
                  "Pass the gradient explicitly, e.g. backward(ones_like(out))",
                  describe(root));
      g = ones_like(root);
    }
    NABLA_CHECK(g.sizes() == root.sizes() && g.device() == root.device(),
                "backward: gradient {} does not match the output {}", describe(g), describe(root));
    root_edges.push_back(gradient_edge(root));
    NABLA_ASSERT(root_edges.back().valid(), "backward: a root that requires grad has no gradient edge");
    initial.push_back(std::move(g));
  }

  // 1. Dependency counts.
  std::unordered_map<Node*, int> dependencies;
  std::unordered_map<Node*, std::shared_ptr<Node>> keep_alive;
  std::vector<Node*> stack;
  for (const auto& e : root_edges) {
    if (keep_alive.emplace(e.node.get(), e.node).second) stack.push_back(e.node.get());
  }
  while (!stack.empty()) {
    Node* node = stack.back();
    stack.pop_back();
    for (const auto& e : node->next_edges) {
      if (!e.valid()) continue;
      ++dependencies[e.node.get()];
      if (keep_alive.emplace(e.node.get(), e.node).second) stack.push_back(e.node.get());
    }
  }

  // 2./3. Run in dependency order.
  AutoGradMode grad_mode(options.create_graph);
  // Gradients follow the dtypes the forward chose; the policy must not re-cast them (a bias
  // gradient summed in float32 would no longer match its float16 input). See amp.md.
  const autocast::State autocast_before = autocast::current();
  autocast::set_current({.enabled = false});
  struct RestoreAutocast {
    autocast::State state;
    ~RestoreAutocast() { autocast::set_current(state); }
  } restore_autocast{autocast_before};
  std::unordered_map<Node*, TensorList> buffers;
  auto add_to_buffer = [&](Node* node, uint32_t input_nr, Tensor g) {
    auto& buffer = buffers[node];
    if (buffer.size() < node->num_outputs) buffer.resize(node->num_outputs);
    Tensor& slot = buffer[input_nr];
    slot = slot.defined() ? slot + g : std::move(g);
  };
  // Callbacks belong to the outermost backward on this thread: a backward nested inside a node
  // (gradient checkpointing's recompute) must not flush DDP's buckets early.
  std::vector<std::function<void()>> callbacks;
  const bool outermost = current_callbacks == nullptr;
  struct RestoreCallbacks {
    bool outermost;
    ~RestoreCallbacks() {
      if (outermost) current_callbacks = nullptr;
    }
  } restore_callbacks{outermost};
  if (outermost) current_callbacks = &callbacks;
  std::priority_queue<ReadyEntry> ready;
  for (size_t i = 0; i < root_edges.size(); ++i)
    add_to_buffer(root_edges[i].node.get(), root_edges[i].input_nr, initial[i]);
  for (const auto& e : root_edges) {
    if (dependencies[e.node.get()] == 0) {
      dependencies[e.node.get()] = -1;  // queued
      ready.push({priority(e.node.get()), e.node.get()});
    }
  }

  while (!ready.empty()) {
    Node* node = ready.top().node;
    ready.pop();
    TensorList grads = std::move(buffers[node]);
    buffers.erase(node);
    grads.resize(node->num_outputs);
    for (auto& [output, hook] : node->pre_hooks) {
      if (output < grads.size() && grads[output].defined()) {
        Tensor replaced = hook(grads[output]);
        if (replaced.defined()) grads[output] = std::move(replaced);
      }
    }
    TensorList outputs = node->apply(std::move(grads));
    // As in PyTorch, create_graph implies retain_graph: the new graph refers to these nodes.
    if (!options.retain_graph && !options.create_graph) node->release_saved();
    for (size_t i = 0; i < node->next_edges.size(); ++i) {
      const Edge& e = node->next_edges[i];
      if (!e.valid()) continue;
      if (i < outputs.size() && outputs[i].defined())
        add_to_buffer(e.node.get(), e.input_nr, std::move(outputs[i]));
      if (--dependencies[e.node.get()] == 0) ready.push({priority(e.node.get()), e.node.get()});
    }
  }
  // A callback may queue another (run after it); index, since push_back can reallocate.
  for (size_t i = 0; i < callbacks.size(); ++i) {
    auto callback = std::move(callbacks[i]);
    callback();
  }
}

}  // namespace nabla::autograd
