#include "nabla/ops/fusion/recorder.h"

#include <cstdlib>
#include <cstring>
#include <exception>
#include <span>

#include "nabla/core/dispatch.h"
#include "nabla/core/error.h"
#include "nabla/core/logging.h"
#include "nabla/ops/cuda/fusion/executor.h"
#include "nabla/ops/fusion/plan.h"

namespace nabla::ops::fusion {

// Note [The recorder]: a held op keeps its inputs and its output tensor alive, so no buffer it
// reads or writes is reused before it runs; the front end has already allocated its output, so
// the results' addresses, shapes and strides are those of eager mode. When a flush comes, a
// result is live out when anyone besides the recorder still holds its tensor or its storage
// (the caller's variable, a view, autograd's saved tensors): those are written, the rest are
// kept in registers. A read of a held result through another view (a transpose, a slice) is not
// something a fused kernel can give, so it flushes first, as every op that is not pointwise does
// (nabla::dispatch). Recorded ops always write fresh outputs, so no held op's input can change
// under it: in-place ops are not recorded, and they flush.

namespace {

thread_local Recorder* t_recorder = nullptr;

// The most ops held at once: a step's pointwise chains are short, and this bounds the plan.
constexpr size_t kMaxHeldOps = 1024;

}  // namespace

Recorder::~Recorder() {
  try {
    flush();
  } catch (const std::exception& e) {
    ::nabla::logger().error("step compiler: running the held ops failed: {}", e.what());
  }
}

bool Recorder::accepts(std::initializer_list<const Tensor*> inputs, const Tensor& out) {
  if (flushing_ || !out.is_cuda() || out.numel() == 0) return false;
  for (const Tensor* t : inputs) {
    if (!t->defined() || t->device() != out.device()) return false;
  }
  bool must_flush =
      region_.ops().size() >= kMaxHeldOps || (!tensors_.empty() && tensors_.front().device() != out.device());
  for (const Tensor* t : inputs) {
    if (!results_.contains(t->storage().get())) continue;
    // A held result read through the very tensor it was written to is a register of the
    // kernel; read through another view, it must be in memory first.
    const auto it = by_impl_.find(t->impl());
    const bool same_view = it != by_impl_.end() && region_.value(it->second).sizes == t->sizes() &&
                           region_.value(it->second).strides == t->strides();
    must_flush = must_flush || !same_view;
  }
  if (must_flush) flush();
  return true;
}

int Recorder::value_of(const Tensor& t) {
  if (const auto it = by_impl_.find(t.impl()); it != by_impl_.end()) return it->second;
  const int v = region_.input(t.dtype(), t.sizes(), t.strides());
  tensors_.push_back(t);
  by_impl_.emplace(t.impl(), v);
  return v;
}

void Recorder::add(Op op, const Tensor& out) {
  const int v = region_.add(std::move(op), out.dtype(), out.sizes(), out.strides());
  NABLA_ASSERT(static_cast<size_t>(v) == tensors_.size(), "recorder: values and tensors out of step");
  tensors_.push_back(out);
  by_impl_.emplace(out.impl(), v);
  results_.insert(out.storage().get());
  ++stats_.recorded_ops;
}

bool Recorder::unary(UnaryOp op, const Tensor& x, const Tensor& out, UnaryParams params) {
  if (!accepts({&x}, out)) return false;
  add({.kind = OpKind::Unary, .unary = op, .params = params, .args = {value_of(x)}}, out);
  return true;
}

bool Recorder::binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out, double alpha) {
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
  if (src.sizes() != out.sizes() || !accepts({&src}, out)) return false;
  add({.kind = OpKind::Cast, .args = {value_of(src)}}, out);
  return true;
}

void Recorder::flush() {
  if (flushing_ || region_.empty()) return;
  flushing_ = true;
  // Forget what was held whatever happens: a failed run must not run again at the next flush.
  struct Forget {
    Recorder& r;
    ~Forget() {
      r.region_.clear();
      r.tensors_.clear();
      r.by_impl_.clear();
      r.results_.clear();
      r.flushing_ = false;
    }
  } forget{*this};

  for (size_t v = 0; v < tensors_.size(); ++v) {
    if (region_.values()[v].producer < 0) continue;
    const Tensor& t = tensors_[v];
    if (t.impl_ptr().use_count() > 1 || t.storage().use_count() > 1)
      region_.mark_live_out(static_cast<int>(v));
  }
  const Plan plan = plan_groups(region_);
  const std::span<const Tensor> tensors(tensors_);
  const auto counts = nabla::detail::dispatch_to<false>(
      "fused pointwise", tensors_.front().device(),
      []() -> ops::cuda::fusion::RunCounts {
        NABLA_ASSERT(false, "the step compiler recorded ops on the CPU");
        return {};
      },
      [&] { return ops::cuda::fusion::run_region(region_, plan, tensors); });
  ++stats_.flushes;
  stats_.fused_kernels += counts.fused_kernels;
  stats_.fused_ops += counts.fused_ops;
  stats_.eager_ops += counts.eager_ops;
  stats_.fallbacks += counts.fallbacks;
  stats_.dead_ops += static_cast<int>(plan.dead.size());
  stats_.compiled += counts.compiled;
  stats_.from_disk += counts.from_disk;
  stats_.compile_s += counts.compile_s;
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

bool fusion_enabled_by_environment() {
  const char* v = std::getenv("NABLA_FUSION");
  if (v == nullptr) return true;
  return std::strcmp(v, "0") != 0 && std::strcmp(v, "off") != 0 && std::strcmp(v, "false") != 0;
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

FusionScope::~FusionScope() {
  if (!recorder_) return;
  recorder_.reset();  // flushes
  detail::t_deferred = previous_;
  ops::fusion::t_recorder = nullptr;
}

void FusionScope::flush() {
  if (recorder_) recorder_->flush();
}

FusionStats FusionScope::stats() const {
  if (!recorder_) return {};
  return static_cast<const ops::fusion::Recorder&>(*recorder_).stats();
}

}  // namespace nabla
