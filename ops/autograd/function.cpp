// Recording ops into the autograd graph, and the two node kinds (see nodes.h).
#include "nabla/ops/autograd/function.h"

#include "nabla/ops/autograd/detail/nodes.h"
#include "nabla/ops/autograd/detail/pointwise_node.h"
#include "nabla/ops/autograd/detail/saved_report.h"
#include "nabla/ops/detail/alias.h"
#include "nabla/ops/elementwise.h"
#include "nabla/ops/factory.h"
#include "nabla/ops/fusion/recompute.h"

namespace nabla::autograd {

bool needs_grad(std::initializer_list<std::reference_wrapper<const Tensor>> tensors) {
  if (!GradMode::is_enabled()) return false;
  for (const Tensor& t : tensors) {
    if (t.defined() && t.requires_grad()) return true;
  }
  return false;
}

bool needs_grad(const TensorList& tensors) {
  if (!GradMode::is_enabled()) return false;
  for (const Tensor& t : tensors) {
    if (t.defined() && t.requires_grad()) return true;
  }
  return false;
}

Edge gradient_edge(const Tensor& t) {
  if (!t.defined() || !t.requires_grad()) return {};
  if (t.grad_fn()) return {t.grad_fn(), t.output_nr()};
  auto& meta = t.impl()->autograd_meta();
  auto acc = meta.grad_accumulator.lock();
  if (!acc) {
    acc = std::make_shared<AccumulateGrad>(t.impl_ptr());
    meta.grad_accumulator = acc;
  }
  return {acc, 0};
}

namespace detail {

namespace {
thread_local bool t_recording_pointwise = false;
}  // namespace

bool recording_pointwise() {
  return t_recording_pointwise;
}
PointwiseNodeScope::PointwiseNodeScope() : outer_(t_recording_pointwise) {
  t_recording_pointwise = true;
}
PointwiseNodeScope::~PointwiseNodeScope() {
  t_recording_pointwise = outer_;
}

}  // namespace detail

void record(const char* name, const TensorList& inputs, const TensorList& outputs, const TensorList& save,
            BackwardFn backward) {
  std::vector<SavedTensor> saved;
  saved.reserve(save.size());
  // In a compiled step a saved pointwise value may be kept as its recipe (Note [Recomputed saved
  // values] in ops/fusion/recompute.cpp).
  for (const auto& t : save) {
    auto recipe = ops::fusion::recompute_for_backward(t);
    if (detail::saved_report_enabled()) detail::note_saved(name, t, recipe != nullptr);
    saved.emplace_back(t, std::move(recipe));
  }
  std::vector<bool> needs(inputs.size());
  std::vector<TensorMeta> input_meta(inputs.size()), output_meta(outputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    needs[i] = inputs[i].defined() && inputs[i].requires_grad();
    input_meta[i] = TensorMeta::of(inputs[i]);
  }
  for (size_t i = 0; i < outputs.size(); ++i) output_meta[i] = TensorMeta::of(outputs[i]);

  // Saved tensors that are outputs of this op refer back to the node weakly (see SavedTensor).
  std::vector<std::pair<size_t, uint32_t>> saved_outputs;
  for (size_t s = 0; s < save.size(); ++s) {
    for (size_t o = 0; o < outputs.size(); ++o) {
      if (save[s].defined() && save[s].is_same(outputs[o]))
        saved_outputs.emplace_back(s, static_cast<uint32_t>(o));
    }
  }
  auto node = std::make_shared<FunctionNode>(name, std::move(backward), std::move(saved), needs,
                                             std::move(input_meta), std::move(output_meta));
  for (auto [s, o] : saved_outputs) node->mark_saved_output(s, node, o);
  node->pointwise = detail::recording_pointwise();
  // Edges are read before outputs are rewired, so an in-place op may list `self` as both.
  node->next_edges.reserve(inputs.size());
  for (const auto& in : inputs) node->next_edges.push_back(gradient_edge(in));
  node->num_outputs = static_cast<uint32_t>(outputs.size());
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (!outputs[i].defined() || !is_floating(outputs[i].dtype())) continue;
    auto& meta = outputs[i].impl()->autograd_meta();
    meta.requires_grad = true;
    meta.grad_fn = node;
    meta.output_nr = static_cast<uint32_t>(i);
  }
}

void check_inplace(const Tensor& self, const char* op) {
  ops::fusion::before_inplace_write(self);  // recipes reading self keep their value first
  if (!GradMode::is_enabled() || !self.requires_grad()) return;
  NABLA_CHECK(!self.is_leaf(),
              "{}: a leaf tensor that requires grad ({}) cannot be modified in place while grad mode is on; "
              "wrap the update in a NoGradGuard, or use an out-of-place op",
              op, describe(self));
  NABLA_CHECK(
      !self.impl()->autograd_if_any()->is_view_of_grad_tensor,
      "{}: in-place modification of a view of a tensor that requires grad is not supported; its base's "
      "history would miss the write. Use the out-of-place op, or clone() the view first",
      op);
}

void note_unseen_inplace_write(const Tensor& t) {
  ops::fusion::after_unseen_write(t);
}

void rebase_history(const Tensor& self, const Tensor& result) {
  if (!result.defined() || !result.grad_fn()) return;
  auto& meta = self.impl()->autograd_meta();
  meta.requires_grad = true;
  meta.grad_fn = result.grad_fn();
  meta.output_nr = result.output_nr();
}

// ---------------------------------------------------------------------------------------------

FunctionNode::FunctionNode(const char* name, BackwardFn fn, std::vector<SavedTensor> saved,
                           std::vector<bool> needs_input_grad, std::vector<TensorMeta> inputs,
                           std::vector<TensorMeta> outputs)
    : name_(name),
      fn_(std::move(fn)),
      saved_(std::move(saved)),
      needs_input_grad_(std::move(needs_input_grad)),
      inputs_(std::move(inputs)),
      outputs_(std::move(outputs)) {}

TensorList FunctionNode::apply(TensorList&& grads) {
  NABLA_CHECK(
      !released_,
      "{}: trying to run backward through this part of the graph a second time, but its saved tensors "
      "were freed by the first backward; pass retain_graph=true to the first backward() to keep them",
      name_);
  bool any = false;
  for (const auto& g : grads) any = any || g.defined();
  if (!any) return TensorList(next_edges.size());

  BackwardContext ctx;
  ctx.needs_input_grad = needs_input_grad_;
  ctx.releases_saved = detail::t_releases_saved;
  // Ops with several outputs see zeros where no gradient flowed, so their lambdas stay simple.
  for (size_t i = 0; i < grads.size(); ++i) {
    if (!grads[i].defined() && i < outputs_.size() && outputs_[i].defined && is_floating(outputs_[i].dtype)) {
      grads[i] = zeros(outputs_[i].sizes, {.dtype = outputs_[i].dtype, .device = outputs_[i].device});
    }
  }
  ctx.grads = std::move(grads);
  ctx.saved.reserve(saved_.size());
  for (size_t i = 0; i < saved_.size(); ++i) ctx.saved.push_back(saved_[i].unpack(name_, i));

  TensorList result = fn_(ctx);
  NABLA_ASSERT(result.size() == next_edges.size(), "{} returned {} gradients for {} inputs", name_,
               result.size(), next_edges.size());
  for (size_t i = 0; i < result.size(); ++i) {
    if (!needs_input_grad_[i]) {
      result[i] = Tensor();
      continue;
    }
    if (!result[i].defined()) continue;
    const auto& in = inputs_[i];
    NABLA_ASSERT(result[i].sizes() == in.sizes, "{}: gradient #{} has shape {}, input has {}", name_, i,
                 shape_str(result[i].sizes()), shape_str(in.sizes));
    if (result[i].dtype() != in.dtype) result[i] = result[i].to(in.dtype);
  }
  return result;
}

void FunctionNode::release_saved() {
  for (auto& s : saved_) s.reset();
  fn_ = nullptr;  // frees whatever the lambda captured
  released_ = true;
}

TensorList AccumulateGrad::apply(TensorList&& grads) {
  auto impl = leaf_.lock();
  if (!impl || !grads[0].defined()) return {};
  Tensor leaf(impl);
  Tensor g = std::move(grads[0]);
  auto& meta = impl->autograd_meta();
  for (auto& hook : meta.leaf_pre_hooks) {
    Tensor replaced = hook(g);
    if (replaced.defined()) g = std::move(replaced);
  }
  Tensor& grad = meta.grad;
  if (!grad.defined() && !GradMode::is_enabled()) {
    // Note [Gradient layout]: a new .grad takes the leaf's layout when the leaf is dense, as in
    // PyTorch, so the optimizers' and clip_grad_norm_'s fused multi-tensor paths (which need the
    // gradient laid out as its parameter) see every gradient. A weight used transposed (GPT-2's
    // Conv1D calls linear(x, weight.t())) otherwise kept a transposed gradient and took the
    // per-tensor path: some ten kernels per parameter each step.
    const bool leaf_dense = is_non_overlapping_and_dense(leaf.sizes(), leaf.strides());
    bool same_strides = true;  // over the dims that have them: a size-1 dim's stride is arbitrary
    for (int64_t d = 0; d < leaf.dim(); ++d) {
      if (leaf.size(d) > 1 && g.stride(d) != leaf.stride(d)) same_strides = false;
    }
    const bool fits = g.dtype() == leaf.dtype() && (!leaf_dense || same_strides);
    // Own the buffer: later backward passes add into it in place, which must not write into
    // memory shared with another tensor (a broadcast gradient, or the caller's root gradient).
    const bool exclusive = g.impl_ptr().use_count() == 1 && g.storage().use_count() == 1 &&
                           is_non_overlapping_and_dense(g.sizes(), g.strides());
    if (fits && exclusive) {
      grad = g.detach();
    } else if (leaf_dense) {
      // Dense strides address exactly numel() elements from offset 0: the leaf's strides exactly.
      const Tensor flat = Tensor::empty({leaf.numel()}, {.dtype = leaf.dtype(), .device = leaf.device()});
      grad = ops::alias(flat, leaf.sizes(), leaf.strides(), 0);
      grad.copy_(g);  // converts the dtype in the same pass
    } else {
      grad =
          g.dtype() == leaf.dtype() ? g.clone(MemoryFormat::Preserve).detach() : g.to(leaf.dtype()).detach();
    }
    for (auto& hook : meta.post_accumulate_hooks) hook(leaf);
    return {};
  }
  if (g.dtype() != leaf.dtype()) g = g.to(leaf.dtype());
  if (!grad.defined()) {
    grad = g;  // create_graph: keep the history
  } else if (GradMode::is_enabled()) {
    grad = grad + g;
  } else {
    grad.add_(g);
  }
  for (auto& hook : meta.post_accumulate_hooks) hook(leaf);
  return {};
}

}  // namespace nabla::autograd
