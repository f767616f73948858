// The backward engine: a dependency-counted walk of the graph from the roots.
//
// 1. Count, for every node reachable from the roots, how many edges point at it.
// 2. Run nodes whose count reached zero, newest first (highest sequence_nr), leaf accumulators
//    before anything else, so leaf gradients (and DDP's buckets) are final as early as possible,
//    and pointwise ops' nodes before the rest (Note [Pointwise nodes first]).
// 3. Each node's outputs are added into the input buffers of the nodes its edges name.
// Gradients for one node input are summed in its buffer before the node runs, which is what
// makes a leaf's gradient "final" when its AccumulateGrad runs. A running node may take the sum so
// far for one of its inputs (take_pending_gradient) and fold it into the gradient it computes
// (a convolution's data gradient accumulates into it in the GEMM's epilogue): the sum is the same,
// without the elementwise pass that would add the two. Residual networks sum two gradients at
// every block input.
#include "nabla/ops/autograd/engine.h"

#include <optional>
#include <queue>
#include <unordered_map>

#include "nabla/core/autocast.h"
#include "nabla/core/autograd/grad_mode.h"
#include "nabla/core/profiler.h"
#include "nabla/ops/autograd/detail/nodes.h"
#include "nabla/ops/autograd/detail/saved_report.h"
#include "nabla/ops/autograd/function.h"
#include "nabla/ops/elementwise.h"
#include "nabla/ops/factory.h"

namespace nabla::autograd {

namespace {

// Note [Pointwise nodes first]: among the nodes ready to run, leaf accumulators go first (leaf
// gradients, and DDP's buckets, final as early as possible), then the nodes of pointwise ops, then
// the rest, each newest first. A pointwise node's backward is pointwise ops, which a compiled
// step holds and fuses until something else runs (Note [Deferred launches]); run before a ready
// matmul's backward, which would flush them, they join the pointwise ops just held. SwiGLU's
// silu_backward then fuses with the multiply's backward before the up-projection's weight
// gradient is computed, instead of running as a kernel of its own after it. The order changes
// when a node runs, not what it computes; a gradient summed from several nodes may be summed in
// another order than newest-first alone would give, the same order in eager and compiled steps.
struct Priority {
  int rank = 0;  // 2: a leaf accumulator, 1: a pointwise op's node, 0: any other node
  uint64_t sequence_nr = 0;
  bool operator<(const Priority& other) const {
    return rank != other.rank ? rank < other.rank : sequence_nr < other.sequence_nr;
  }
};

Priority priority(const Node* node) {
  if (dynamic_cast<const AccumulateGrad*>(node)) return {.rank = 2, .sequence_nr = node->sequence_nr};
  const auto* function = dynamic_cast<const FunctionNode*>(node);
  return {.rank = function != nullptr && function->pointwise ? 1 : 0, .sequence_nr = node->sequence_nr};
}

// The callbacks queued during the outermost backward pass running on this thread.
thread_local std::vector<std::function<void()>>* current_callbacks = nullptr;

// The node running on this thread and the pending-gradient lookup of its backward pass
// (take_pending_gradient); null outside a node.
thread_local std::function<Tensor(size_t)>* current_pending = nullptr;

struct ReadyEntry {
  Priority priority;
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

Tensor take_pending_gradient(size_t input) {
  return current_pending ? (*current_pending)(input) : Tensor();
}

namespace {

// The roots' gradient edges and their starting gradients, checked.
struct Roots {
  std::vector<Edge> edges;
  TensorList grads;
};

Roots check_roots(const TensorList& roots, const TensorList& root_grads) {
  NABLA_CHECK(root_grads.empty() || root_grads.size() == roots.size(),
              "backward: {} gradients given for {} outputs", root_grads.size(), roots.size());
  Roots out;
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
    out.edges.push_back(gradient_edge(root));
    NABLA_ASSERT(out.edges.back().valid(), "backward: a root that requires grad has no gradient edge");
    out.grads.push_back(std::move(g));
  }
  return out;
}

// The CUDA device of the first defined gradient, or -1: where the profiler times a node.
int cuda_index(const TensorList& grads) {
  for (const Tensor& g : grads) {
    if (g.defined()) return g.is_cuda() ? g.device().index : -1;
  }
  return -1;
}

// One backward pass over the graph below the roots: steps 1 to 3 of the comment at the top.
class GraphTask {
 public:
  explicit GraphTask(const std::vector<Edge>& roots) { count_dependencies(roots); }

  void run(Roots roots, bool release_saved) {
    // NABLA_SAVED_REPORT: the saved set, and the node where the device's memory peaks.
    std::optional<detail::BackwardReport> report;
    if (detail::saved_report_enabled() && !roots.grads.empty() && roots.grads[0].defined())
      report.emplace(roots.grads[0].device());
    for (size_t i = 0; i < roots.edges.size(); ++i)
      add_to_buffer(roots.edges[i].node.get(), roots.edges[i].input_nr, std::move(roots.grads[i]));
    for (const auto& e : roots.edges) {
      if (dependencies_[e.node.get()] == 0) {
        dependencies_[e.node.get()] = -1;  // queued
        ready_.push({priority(e.node.get()), e.node.get()});
      }
    }
    while (!ready_.empty()) {
      Node* node = ready_.top().node;
      ready_.pop();
      TensorList inputs = take_inputs(node);
      TensorList outputs;
      {
        // core/profiler.h: a backward node owns the time of the ops it runs.
        const bool timed = profiler::detail::active();
        const profiler::detail::Scope scope(timed ? node->name() + " (backward)" : std::string(),
                                            timed ? cuda_index(inputs) : -1);
        std::function<Tensor(size_t)> pending = [this, node](size_t input) {
          return take_pending(node, input);
        };
        std::function<Tensor(size_t)>* outer = current_pending;
        current_pending = &pending;
        const bool outer_releases = autograd::detail::t_releases_saved;
        autograd::detail::t_releases_saved = release_saved;
        try {
          outputs = node->apply(std::move(inputs));
        } catch (...) {
          current_pending = outer;
          autograd::detail::t_releases_saved = outer_releases;
          throw;
        }
        current_pending = outer;
        autograd::detail::t_releases_saved = outer_releases;
      }
      if (release_saved) node->release_saved();
      send_outputs(node, std::move(outputs));
      if (report) report->after_node(node->name());
    }
  }

 private:
  // 1. How many edges point at each node reachable from the roots.
  void count_dependencies(const std::vector<Edge>& roots) {
    std::vector<Node*> stack;
    for (const auto& e : roots) {
      if (keep_alive_.emplace(e.node.get(), e.node).second) stack.push_back(e.node.get());
    }
    while (!stack.empty()) {
      Node* node = stack.back();
      stack.pop_back();
      for (const auto& e : node->next_edges) {
        if (!e.valid()) continue;
        ++dependencies_[e.node.get()];
        if (keep_alive_.emplace(e.node.get(), e.node).second) stack.push_back(e.node.get());
      }
    }
  }

  void add_to_buffer(Node* node, uint32_t input_nr, Tensor g) {
    auto& buffer = buffers_[node];
    if (buffer.size() < node->num_outputs) buffer.resize(node->num_outputs);
    Tensor& slot = buffer[input_nr];
    slot = slot.defined() ? slot + g : std::move(g);
  }

  // The gradient summed so far for input `input` of the running `node`, moved out of the buffer
  // of the node its edge names (which then holds none), or undefined: none arrived yet, the
  // destination is a leaf accumulator (its hooks and DDP see gradients as they arrive), or the
  // backward is itself recorded (create_graph).
  Tensor take_pending(Node* node, size_t input) {
    if (GradMode::is_enabled() || input >= node->next_edges.size()) return {};
    const Edge& e = node->next_edges[input];
    if (!e.valid() || dynamic_cast<const AccumulateGrad*>(e.node.get())) return {};
    auto it = buffers_.find(e.node.get());
    if (it == buffers_.end() || e.input_nr >= it->second.size()) return {};
    return std::move(it->second[e.input_nr]);
  }

  // The summed gradients of a ready node's outputs, through its pre-hooks.
  TensorList take_inputs(Node* node) {
    TensorList grads = std::move(buffers_[node]);
    buffers_.erase(node);
    grads.resize(node->num_outputs);
    for (auto& [output, hook] : node->pre_hooks) {
      if (output < grads.size() && grads[output].defined()) {
        Tensor replaced = hook(grads[output]);
        if (replaced.defined()) grads[output] = std::move(replaced);
      }
    }
    return grads;
  }

  // 3. A node's results into the buffers of the nodes its edges name; those left with no
  // pending edge become ready.
  void send_outputs(Node* node, TensorList outputs) {
    for (size_t i = 0; i < node->next_edges.size(); ++i) {
      const Edge& e = node->next_edges[i];
      if (!e.valid()) continue;
      if (i < outputs.size() && outputs[i].defined())
        add_to_buffer(e.node.get(), e.input_nr, std::move(outputs[i]));
      if (--dependencies_[e.node.get()] == 0) ready_.push({priority(e.node.get()), e.node.get()});
    }
  }

  std::unordered_map<Node*, int> dependencies_;
  std::unordered_map<Node*, std::shared_ptr<Node>> keep_alive_;
  std::unordered_map<Node*, TensorList> buffers_;
  std::priority_queue<ReadyEntry> ready_;
};

// Gradients follow the dtypes the forward chose; the policy must not re-cast them (a bias
// gradient summed in float32 would no longer match its float16 input). See amp.md.
class AutocastOff {
 public:
  AutocastOff() : before_(autocast::current()) { autocast::set_current({.enabled = false}); }
  ~AutocastOff() { autocast::set_current(before_); }
  AutocastOff(const AutocastOff&) = delete;
  AutocastOff& operator=(const AutocastOff&) = delete;

 private:
  autocast::State before_;
};

// Callbacks belong to the outermost backward on this thread: a backward nested inside a node
// (gradient checkpointing's recompute) must not flush DDP's buckets early.
class CallbackScope {
 public:
  CallbackScope() : outermost_(current_callbacks == nullptr) {
    if (outermost_) current_callbacks = &callbacks_;
  }
  ~CallbackScope() {
    if (outermost_) current_callbacks = nullptr;
  }
  CallbackScope(const CallbackScope&) = delete;
  CallbackScope& operator=(const CallbackScope&) = delete;

  // A callback may queue another (run after it); index, since push_back can reallocate.
  void run() {
    for (size_t i = 0; i < callbacks_.size(); ++i) {
      auto callback = std::move(callbacks_[i]);
      callback();
    }
  }

 private:
  bool outermost_;
  std::vector<std::function<void()>> callbacks_;
};

}  // namespace

void backward(const TensorList& roots, const TensorList& root_grads, BackwardOptions options) {
  Roots checked = check_roots(roots, root_grads);
  GraphTask task(checked.edges);
  AutoGradMode grad_mode(options.create_graph);
  AutocastOff autocast_off;
  CallbackScope callbacks;
  // As in PyTorch, create_graph implies retain_graph: the new graph refers to these nodes.
  task.run(std::move(checked), !options.retain_graph && !options.create_graph);
  callbacks.run();
}

}  // namespace nabla::autograd
