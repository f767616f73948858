#include "nabla/ops/fusion/recorder.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <utility>

#include "nabla/core/cuda/stream.h"
#include "nabla/core/dispatch.h"
#include "nabla/core/error.h"
#include "nabla/core/logging.h"
#include "nabla/ops/cuda/fusion/executor.h"
#include "nabla/ops/detail/alias.h"
#include "nabla/ops/fusion/compile.h"
#include "nabla/ops/fusion/recompute.h"

namespace nabla::ops::fusion {

// Note [The recorder]: a held op keeps its inputs and its output tensor alive, so no buffer it
// reads or writes is reused before it runs; the front end has already allocated its output, so
// the results' addresses, shapes and strides are those of eager mode. When a flush comes, a
// result is live out when anyone besides the recorder still holds its tensor or its storage
// (the caller's variable, a view, autograd's saved tensors): those are written, the rest are
// kept in registers. A read of a held result through another view (a transpose, a reshape) is
// not something a fused kernel can give, so it flushes first, as every op that is not pointwise
// does (nabla::dispatch); a slice is computed again instead (Note [Slices of held results]). Recorded ops
// always write fresh outputs, so no held op's input can change under it: in-place ops are not recorded, and
// they flush.

namespace {

thread_local Recorder* t_recorder = nullptr;

}  // namespace

Recorder::~Recorder() {
  try {
    flush();
  } catch (const std::exception& e) {
    ::nabla::logger().error("step compiler: running the held ops failed: {}", e.what());
  }
}

// The value `t` is, if it is still the very tensor recorded (an address can be reused once the
// recorded tensor is gone); -1 otherwise.
int Recorder::find_value(const std::unordered_map<const TensorImpl*, int>& by_impl,
                         const std::vector<Slot>& slots, const Tensor& t) {
  const auto it = by_impl.find(t.impl());
  if (it == by_impl.end()) return -1;
  const Slot& slot = slots[static_cast<size_t>(it->second)];
  if (slot.tensor.defined()) return slot.tensor.impl() == t.impl() ? it->second : -1;
  return slot.impl.lock().get() == t.impl() ? it->second : -1;
}

bool Recorder::accepts(std::initializer_list<const Tensor*> inputs, const Tensor& out) {
  if (flushing_ || nabla::detail::t_dispatch_depth > 0 || !out.is_cuda() || out.numel() == 0) return false;
  for (const Tensor* t : inputs) {
    if (!t->defined() || t->device() != out.device()) return false;
  }
  // Held ops run on the stream they were recorded on: a switch of streams (a StreamGuard, the
  // prefetcher's copy stream) flushes first, so the ops on each stream stay in its order.
  const nabla::cuda::Stream stream = nabla::cuda::current_stream(out.device().index);
  bool must_flush = region_.ops().size() >= kMaxHeldOps ||
                    ((!slots_.empty() || held_) && (device_ != out.device() || !(stream_ == stream)));
  std::vector<const Tensor*> views;  // held results read through another view
  for (const Tensor* t : inputs) {
    const auto it = by_storage_.find(t->storage().get());
    if (it == by_storage_.end()) continue;
    if (slots_[static_cast<size_t>(it->second)].storage.lock() != t->storage()) continue;  // a stale address
    // A held result read through the very tensor it was written to is a register of the
    // kernel; read through a slice, it is computed again for the slice (Note [Slices of held
    // results]); through any other view, it must be in memory first.
    const int v = result_of(*t);
    const bool same_view =
        v >= 0 && region_.value(v).sizes == t->sizes() && region_.value(v).strides == t->strides();
    if (!same_view) views.push_back(t);
  }
  for (const Tensor* t : views) {
    if (must_flush) break;
    if (result_of(*t) >= 0) continue;  // the same view read twice (c * c): pushed down once
    must_flush = !push_down(*t);
  }
  if (must_flush) flush();
  if (slots_.empty() && !held_) {
    device_ = out.device();
    stream_ = stream;
  }
  return true;
}

int Recorder::value_of(const Tensor& t) {
  if (const int v = result_of(t); v >= 0) return v;
  // An input: held, so nothing reuses its memory before the held ops read it.
  const int v = region_.input(t.dtype(), t.sizes(), t.strides());
  slots_.push_back({.tensor = t});
  by_impl_[t.impl()] = v;
  return v;
}

// Note [Intermediates nobody holds]: the recorder holds its results weakly. A result the caller
// drops is freed at once, as eager mode frees a temporary; at the flush it is read by nothing
// after the region, so no fused kernel writes it, and the executor makes a buffer for it only if
// a later group must read it or its group runs op by op. Holding results strongly would keep a
// chain's every intermediate allocated until the flush, and a compiled step would peak above an
// eager one.
void Recorder::add(Op op, const Tensor& out) {
  const int v = region_.add(std::move(op), out.dtype(), out.sizes(), out.strides());
  NABLA_ASSERT(static_cast<size_t>(v) == slots_.size(), "recorder: values and slots out of step");
  slots_.push_back({.impl = out.impl_ptr(), .storage = out.storage(), .offset = out.storage_offset()});
  by_impl_[out.impl()] = v;
  by_storage_[out.storage().get()] = v;
  ++stats_.recorded_ops;
}

bool Recorder::unary(UnaryOp op, const Tensor& x, const Tensor& out, UnaryParams params) {
  if (!accepts({&x}, out)) return false;
  add({.kind = OpKind::Unary, .unary = op, .params = params, .args = {value_of(x)}}, out);
  return true;
}

bool Recorder::binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out, double alpha) {
  if (binary_pieces(op, a, b, out, alpha)) return true;
  if (!accepts({&a, &b}, out)) return false;
  const int va = value_of(a);
  const int vb = value_of(b);
  add({.kind = OpKind::Binary, .binary = op, .alpha = alpha, .args = {va, vb}}, out);
  return true;
}

bool Recorder::where(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out) {
  if (!accepts({&cond, &a, &b}, out)) return false;
  const int vc = value_of(cond);
  const int va = value_of(a);
  const int vb = value_of(b);
  add({.kind = OpKind::Where, .args = {vc, va, vb}}, out);
  return true;
}

bool Recorder::cast(const Tensor& src, const Tensor& out) {
  if (const auto it = cats_.find(src.impl());
      it != cats_.end() && src.sizes() == out.sizes() && it->second.out.lock().get() == src.impl()) {
    const CatRecord cat = it->second;  // a copy: cast_pieces adds to cats_
    if (cast_pieces(cat, out)) return true;
  }
  if (src.sizes() != out.sizes() || !accepts({&src}, out)) return false;
  add({.kind = OpKind::Cast, .args = {value_of(src)}}, out);
  return true;
}

bool Recorder::reduce(const Tensor& x, const Shape& dims, bool mean, const Tensor& out) {
  // Only a reduction of a held result gains: its input is then never written.
  const int v = result_of(x);
  if (v < 0 || region_.value(v).producer < 0) return false;
  // The generated fold starts its 16-byte loads where element 0 would be aligned, the eager one
  // where the address is: they split the elements alike only for an aligned start (a slice of a
  // held result, Note [Slices of held results], starts anywhere).
  if ((x.storage_offset() * static_cast<int64_t>(x.itemsize())) % 16 != 0) return false;
  if (!reduce_layout(region_.value(v), dims, out.sizes(), out.strides())) return false;
  if (!accepts({&x}, out) || result_of(x) != v) return false;  // accepts may have flushed
  add({.kind = OpKind::Reduce, .dims = dims, .mean = mean, .args = {v}}, out);
  return true;
}

// Value v's tensor (detached), made again over its storage if only a view holds it; undefined
// when nothing does.
Tensor Recorder::tensor_in(const Region& region, const std::vector<Slot>& slots, int v) {
  const Slot& slot = slots.at(static_cast<size_t>(v));
  if (slot.tensor.defined()) return slot.tensor.detach();  // no history: a recipe holds no graph
  if (std::shared_ptr<TensorImpl> impl = slot.impl.lock()) return Tensor(std::move(impl)).detach();
  std::shared_ptr<Storage> storage = slot.storage.lock();
  if (!storage) return {};
  const Value& value = region.value(v);
  return Tensor(
      std::make_shared<TensorImpl>(std::move(storage), slot.offset, value.sizes, value.strides, value.dtype));
}

std::shared_ptr<const autograd::Recompute> Recorder::recompute(const Tensor& t) {
  if (flushing_ || !t.defined()) return nullptr;
  if (const int v = result_of(t); v >= 0)
    return recompute_value(region_, slots_, kept_, recipes_, v, false, t);
  if (const int v = find_value(previous_.by_impl, previous_.slots, t); v >= 0) {
    // Written in place since the flush, it is no longer what the region computed.
    if (t.version() != previous_.slots[static_cast<size_t>(v)].version) return nullptr;
    return recompute_value(previous_.region, previous_.slots, previous_.kept, previous_.recipes, v, true, t);
  }
  return nullptr;
}

std::shared_ptr<const autograd::Recompute> Recorder::recompute_value(const Region& region,
                                                                     const std::vector<Slot>& slots,
                                                                     std::set<int>& kept, Recipes& recipes,
                                                                     int v, bool flushed, const Tensor& t) {
  if (kept.count(v) != 0 || region.value(v).producer < 0) {
    kept.insert(v);
    return nullptr;
  }
  if (const auto it = recipes.find(v); it != recipes.end()) {
    if (auto recipe = it->second.lock()) {
      // A written value saved again (the input of q's, k's and v's projections) is kept once
      // instead: computed again outside a fused kernel, each saver would cost a kernel of its own.
      if (flushed) keep_value(*recipe, t);
      return recipe;
    }
  }
  const KeepCost keep_cost = [&](int u) -> std::optional<int64_t> {
    const Slot& slot = slots[static_cast<size_t>(u)];
    const std::shared_ptr<Storage> storage =
        slot.tensor.defined() ? slot.tensor.storage() : slot.storage.lock();
    // Gone, or (in a flushed region) no longer what the region computed: not a leaf.
    if (!storage || (flushed && storage->version() != slot.version)) return std::nullopt;
    if (kept.count(u) != 0) return 0;
    // A leaf keeps its whole buffer (a slice of a fused projection keeps the projection).
    return std::max<int64_t>(footprint(region.value(u)), static_cast<int64_t>(storage->nbytes()));
  };
  std::optional<RecomputePlan> plan = plan_recompute(region, v, keep_cost);
  if (!plan) {
    kept.insert(v);
    return nullptr;
  }
  std::vector<Tensor> leaves;
  for (int leaf : plan->leaves) {
    leaves.push_back(tensor_in(region, slots, leaf));
    kept.insert(leaf);
  }
  auto recipe = make_recompute(std::move(*plan), std::move(leaves));
  recipes[v] = recipe;
  ++stats_.recomputed_values;
  return recipe;
}

void Recorder::flush() {
  if (flushing_ || (region_.empty() && !held_)) return;
  flushing_ = true;
  // Forget what was held whatever happens: a failed run must not run again at the next flush.
  struct Forget {
    Recorder& r;
    ~Forget() {
      r.region_.clear();
      r.slots_.clear();
      r.by_impl_.clear();
      r.by_storage_.clear();
      r.cats_.clear();
      r.kept_.clear();
      r.recipes_.clear();
      r.held_.reset();
      r.held_relu_ = false;
      r.flushing_ = false;
    }
  } forget{*this};
  if (held_) run_held();
  if (region_.empty()) {  // a held launch alone, or with the ReLU it took in
    ++stats_.flushes;
    return;
  }

  // A result whose buffer someone still holds (its tensor, a view, autograd) is live out.
  std::vector<Tensor> tensors(slots_.size());
  for (size_t v = 0; v < slots_.size(); ++v) {
    const Slot& slot = slots_[v];
    if (slot.tensor.defined()) {
      tensors[v] = slot.tensor;
    } else if (std::shared_ptr<Storage> storage = slot.storage.lock()) {
      const Value& value = region_.values()[v];
      tensors[v] = Tensor(std::make_shared<TensorImpl>(std::move(storage), slot.offset, value.sizes,
                                                       value.strides, value.dtype));
      region_.mark_live_out(static_cast<int>(v));
    }
  }
  const std::shared_ptr<const CompiledRegion> compiled = compile_region(region_);
  const Plan& plan = compiled->plan;
  const auto counts = nabla::detail::dispatch_to<false>(
      "fused pointwise", device_,
      []() -> ops::cuda::fusion::RunCounts {
        NABLA_ASSERT(false, "the step compiler recorded ops on the CPU");
        return {};
      },
      [&] {
        const nabla::cuda::StreamGuard on(stream_);
        return ops::cuda::fusion::run_region(region_, *compiled, tensors, device_);
      });
  remember_flushed();
  ++stats_.flushes;
  stats_.fused_kernels += counts.fused_kernels;
  stats_.fused_ops += counts.fused_ops;
  stats_.fused_reductions += counts.fused_reductions;
  stats_.eager_ops += counts.eager_ops;
  stats_.fallbacks += counts.fallbacks;
  stats_.dead_ops += static_cast<int>(plan.dead.size());
  stats_.compiled += counts.compiled;
  stats_.from_disk += counts.from_disk;
  stats_.compile_s += counts.compile_s;
}

// The region just run becomes previous_: every value watched, with its storage's version now.
void Recorder::remember_flushed() {
  for (Slot& slot : slots_) {
    if (slot.tensor.defined()) {
      slot.impl = slot.tensor.impl_ptr();
      slot.storage = slot.tensor.storage();
      slot.offset = slot.tensor.storage_offset();
      slot.tensor = Tensor();
    }
    if (const std::shared_ptr<Storage> storage = slot.storage.lock()) slot.version = storage->version();
  }
  previous_ = Flushed{.region = std::move(region_),
                      .slots = std::move(slots_),
                      .by_impl = std::move(by_impl_),
                      .kept = std::move(kept_),
                      .recipes = std::move(recipes_)};
}

bool record_reduce(const Tensor& x, const Shape& dims, bool mean, const Tensor& out) {
  Recorder* r = t_recorder;
  return r != nullptr && r->reduce(x, dims, mean, out);
}

bool record_cat(const TensorList& inputs, int64_t dim, const Tensor& out) {
  Recorder* r = t_recorder;
  return r != nullptr && r->cat(inputs, dim, out);
}

bool record_pad(const Tensor& g, int64_t dim, int64_t start, const Tensor& out) {
  Recorder* r = t_recorder;
  return r != nullptr && r->pad(g, dim, start, out);
}

bool holds_result(const Tensor& t) {
  const Recorder* r = t_recorder;
  return r != nullptr && r->holds(t);
}

bool hold_launch(Recorder::HeldLaunch launch) {
  Recorder* r = t_recorder;
  return r != nullptr && r->hold(std::move(launch));
}

std::optional<std::pair<Tensor, Tensor>> relu_backward_parts(const Tensor& grad) {
  Recorder* r = t_recorder;
  return r != nullptr ? r->relu_backward_parts(grad) : std::nullopt;
}

bool fold_relu_in_place(const Tensor& t) {
  Recorder* r = t_recorder;
  return r != nullptr && r->fold_relu_in_place(t);
}

Recorder* active_recorder() {
  return t_recorder;
}

bool record_unary(UnaryOp op, const Tensor& x, const Tensor& out, UnaryParams params) {
  Recorder* r = t_recorder;
  return r != nullptr && r->unary(op, x, out, params);
}
bool record_binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out, double alpha) {
  Recorder* r = t_recorder;
  return r != nullptr && r->binary(op, a, b, out, alpha);
}
bool record_where(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out) {
  Recorder* r = t_recorder;
  return r != nullptr && r->where(cond, a, b, out);
}
bool record_cast(const Tensor& src, const Tensor& out) {
  Recorder* r = t_recorder;
  return r != nullptr && r->cast(src, out);
}

}  // namespace nabla::ops::fusion

namespace nabla {

std::optional<bool> fusion_environment() {
  const char* v = std::getenv("NABLA_FUSION");
  if (v == nullptr) return std::nullopt;
  for (const char* off : {"0", "off", "false"}) {
    if (std::strcmp(v, off) == 0) return false;
  }
  for (const char* on : {"1", "on", "true"}) {
    if (std::strcmp(v, on) == 0) return true;
  }
  return std::nullopt;
}

FusionScope::FusionScope(bool enabled) {
  // A scope inside another is inert: the outer one already records.
  if (!enabled || !kHasCuda || !fusion_enabled_by_environment() || detail::t_deferred != nullptr) return;
  auto recorder = std::make_unique<ops::fusion::Recorder>();
  ops::fusion::t_recorder = recorder.get();
  previous_ = detail::t_deferred;
  detail::t_deferred = recorder.get();
  recorder_ = std::move(recorder);
}

// The last flush's error reaches the caller (unless an exception is already on its way out):
// a value the scope's ops were to write must not be read unwritten after a logged error.
FusionScope::~FusionScope() noexcept(false) {
  if (!recorder_) return;
  std::exception_ptr error;
  if (std::uncaught_exceptions() == 0) {
    try {
      recorder_->flush();
    } catch (...) {
      error = std::current_exception();
    }
  }
  recorder_.reset();  // flushes what is left (nothing, or after an exception: logged)
  detail::t_deferred = previous_;
  ops::fusion::t_recorder = nullptr;
  if (error) std::rethrow_exception(error);
}

void FusionScope::flush() {
  if (recorder_) recorder_->flush();
}

FusionStats FusionScope::stats() const {
  if (!recorder_) return {};
  return static_cast<const ops::fusion::Recorder&>(*recorder_).stats();
}

}  // namespace nabla
