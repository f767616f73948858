#include "nabla/ops/fusion/recompute.h"

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <set>
#include <unordered_map>

#include "nabla/core/autograd/grad_mode.h"
#include "nabla/core/autograd/saved_version.h"
#include "nabla/core/deferred.h"
#include "nabla/core/dispatch.h"
#include "nabla/core/error.h"
#include "nabla/ops/cpu/kernels.h"
#include "nabla/ops/cuda/elementwise/kernels.h"
#include "nabla/ops/detail/alias.h"
#include "nabla/ops/detail/op_kinds.h"
#include "nabla/ops/fusion/recorder.h"

namespace nabla::ops::fusion {

// Note [Recomputed saved values]: autograd saves the values a backward formula needs, and in a
// compiled step many of them are pointwise results a fused kernel would otherwise never write:
// RMSNorm's float32 `x * r` (saved by the multiply by the weight), SwiGLU's `silu(g)` (saved by
// the multiply by `u`). When the recorder still holds such a value as it is saved, the saved
// tensor keeps a recipe instead: the few pointwise ops that compute it from values kept anyway
// (saved by other nodes: `x`, `r`, `g`) or cheaper to keep (smaller, or 16-bit where the value is
// float32). The value itself is then held by nobody at the flush and never written, and the
// backward runs the recipe's ops again where it unpacks the value; recorded there, they fuse into
// the backward's kernel that reads it. This is what torch.compile's partitioner does for pointwise
// ops; the cost is a few arithmetic ops in a memory-bound kernel, the gain a store and a load of
// the value and its memory from the forward to the backward. The ops are the recorded ones with the
// same inputs, so the value computed again has the same bits.
//
// A leaf written in place before the backward would change the value computed again: every write
// through autograd's in-place checks (and copy_many) first makes the recipes reading that memory
// compute their value and keep it (before_inplace_write). A leaf changed some other way is caught
// at unpack by its version, as a saved tensor is.

namespace {

struct Choice {
  int64_t cost = 0;
  std::set<int> ops;     // of the recorded region
  std::set<int> leaves;  // values
};

// The cheapest way to have value v in the backward: keep it, or compute it again from its
// producer's arguments (which recurses). nullopt when neither can be done.
std::optional<Choice> cheapest(const Region& region, int v, int depth, const KeepCost& keep_cost,
                               bool must_compute) {
  std::optional<Choice> keep;
  if (!must_compute) {
    if (const std::optional<int64_t> cost = keep_cost(v))
      keep = Choice{.cost = *cost, .ops = {}, .leaves = {v}};
  }
  const Value& value = region.value(v);
  if (value.producer < 0 || depth == 0) return keep;
  const Op& op = region.op(value.producer);
  // A fill is never saved (only a slice's gradient makes one), so it is never a recipe's op.
  if (op.kind == OpKind::Reduce || op.kind == OpKind::Fill || !fusible(region, op)) return keep;
  Choice again{.cost = 0, .ops = {value.producer}, .leaves = {}};
  std::set<int> seen;
  for (int a : op.args) {
    if (!seen.insert(a).second) continue;  // x * x reads x once
    const std::optional<Choice> arg = cheapest(region, a, depth - 1, keep_cost, false);
    if (!arg) return keep;
    again.cost += arg->cost;
    again.ops.insert(arg->ops.begin(), arg->ops.end());
    again.leaves.insert(arg->leaves.begin(), arg->leaves.end());
  }
  if (keep && keep->cost <= again.cost) return keep;  // equal: keeping does no work
  return again;
}

int64_t elements_covered(const Value& v) {
  int64_t n = 1;
  for (size_t d = 0; d < v.sizes.size(); ++d) {
    if (v.strides[d] != 0) n *= v.sizes[d];
  }
  return n;
}

}  // namespace

int64_t footprint(const Value& v) {
  return elements_covered(v) * static_cast<int64_t>(itemsize(v.dtype));
}

std::optional<RecomputePlan> plan_recompute(const Region& region, int value, const KeepCost& keep_cost) {
  const std::optional<Choice> choice = cheapest(region, value, kMaxRecomputeDepth, keep_cost, true);
  if (!choice || choice->ops.size() > static_cast<size_t>(kMaxRecomputedOps)) return std::nullopt;
  // Costs of leaves shared by two arguments were counted twice on the way: count the union.
  int64_t cost = 0;
  for (int leaf : choice->leaves) cost += keep_cost(leaf).value_or(0);
  if (cost >= footprint(region.value(value))) return std::nullopt;

  RecomputePlan plan;
  std::map<int, int> local;  // recorded value -> plan value
  for (int leaf : choice->leaves) {
    const Value& v = region.value(leaf);
    local[leaf] = plan.region.input(v.dtype, v.sizes, v.strides);
    plan.leaves.push_back(leaf);
  }
  for (int o : choice->ops) {  // ascending: program order
    Op op = region.op(o);
    for (int& a : op.args) a = local.at(a);
    const int result = op.result;
    const Value& v = region.value(result);
    local[result] = plan.region.add(std::move(op), v.dtype, v.sizes, v.strides);
  }
  NABLA_ASSERT(local.at(value) == static_cast<int>(plan.region.values().size()) - 1,
               "plan_recompute: the value is not the plan's last result");
  return plan;
}

namespace {

class Recipe;

// Recipes by the storage of each leaf, for before_inplace_write.
struct Readers {
  std::mutex mutex;
  std::unordered_multimap<const Storage*, const Recipe*> by_storage;
  std::atomic<size_t> count{0};
};
Readers& readers() {
  static Readers* r = new Readers;  // never destroyed: recipes may outlive static destruction
  return *r;
}

class Recipe final : public autograd::Recompute {
 public:
  Recipe(RecomputePlan plan, std::vector<Tensor> leaves)
      : plan_(std::move(plan)), leaves_(std::move(leaves)) {
    versions_.reserve(leaves_.size());
    for (const Tensor& t : leaves_) versions_.push_back(t.version());
    Readers& r = readers();
    const std::lock_guard lock(r.mutex);
    for (const Tensor& t : leaves_) r.by_storage.emplace(t.storage().get(), this);
    r.count.fetch_add(1, std::memory_order_relaxed);
  }
  ~Recipe() override {
    Readers& r = readers();
    const std::lock_guard lock(r.mutex);
    for (const Tensor& t : leaves_) {
      auto [first, last] = r.by_storage.equal_range(t.storage().get());
      for (auto it = first; it != last;) it = it->second == this ? r.by_storage.erase(it) : std::next(it);
    }
    r.count.fetch_sub(1, std::memory_order_relaxed);
  }
  Recipe(const Recipe&) = delete;
  Recipe& operator=(const Recipe&) = delete;

  Tensor run(const std::string& node_name, size_t index) const override {
    const std::lock_guard lock(mutex_);
    NABLA_CHECK(!unseen_write_,
                "{}: saved tensor #{} is computed again in the backward from a tensor that a custom function "
                "wrote in place (through data_ptr) after it was saved; the gradient would be wrong. Write "
                "through nabla's in-place ops, or clone() the tensor before modifying it",
                node_name, index);
    if (kept_.defined()) {
      autograd::check_saved_version(node_name, index, kept_, kept_version_);
      return kept_.detach();  // a tensor of its own: nobody may take the kept buffer for theirs
    }
    return compute(node_name, index);
  }

  // Computes the value now and keeps it (a leaf is about to be written in place). A leaf already
  // changed behind nabla's back cannot give it: unpacking says so then.
  void keep() const {
    const std::lock_guard lock(mutex_);
    if (kept_.defined() || unseen_write_ || !leaves_unchanged()) return;
    kept_ = compute("a saved value", 0);
    kept_version_ = kept_.version();
  }
  // Keeps `value`, the value itself, from now on.
  void keep(const Tensor& value) const {
    const std::lock_guard lock(mutex_);
    if (kept_.defined()) return;
    kept_ = value.detach();
    kept_version_ = kept_.version();
  }
  // A leaf was written where nabla could not see it first (a custom function's kernel).
  void forget() const {
    const std::lock_guard lock(mutex_);
    if (!kept_.defined()) unseen_write_ = true;
  }

 private:
  bool leaves_unchanged() const {
    for (size_t i = 0; i < leaves_.size(); ++i) {
      if (leaves_[i].version() != versions_[i]) return false;
    }
    return true;
  }

  Tensor compute(const std::string& node_name, size_t index) const {
    for (size_t i = 0; i < leaves_.size(); ++i) {
      NABLA_CHECK(leaves_[i].version() == versions_[i],
                  "{}: saved tensor #{} is computed again in the backward from {}, which was modified by an "
                  "in-place operation after it was saved (version {} then, {} now); the gradient would be "
                  "wrong. Use an out-of-place op, or clone() the tensor before modifying it",
                  node_name, index, describe(leaves_[i]), versions_[i], leaves_[i].version());
    }
    const NoGradGuard no_grad;
    const Region& region = plan_.region;
    std::vector<Tensor> t(region.values().size());
    std::copy(leaves_.begin(), leaves_.end(), t.begin());
    const Device device = leaves_.front().device();
    for (const Op& op : region.ops()) {
      const Value& v = region.value(op.result);
      const Tensor out =
          Tensor::empty({layout_extent(v.sizes, v.strides)}, {.dtype = v.dtype, .device = device})
              .as_strided(v.sizes, v.strides);
      run_op(op, t, out);
      t[static_cast<size_t>(op.result)] = out;
    }
    return t.back();
  }

  // The op as its front end runs it: offered to the thread's recorder, else launched.
  static void run_op(const Op& op, const std::vector<Tensor>& t, const Tensor& out) {
    const auto arg = [&](size_t k) -> const Tensor& { return t[static_cast<size_t>(op.args.at(k))]; };
    switch (op.kind) {
      case OpKind::Unary:
        nabla::dispatch_pointwise(
            ops::name(op.unary), out, [&] { ops::cpu::unary(op.unary, arg(0), out, op.params); },
            [&] {
              if (record_unary(op.unary, arg(0), out, op.params)) return;
              flush_deferred();
              ops::cuda::unary(op.unary, arg(0), out, op.params);
            });
        return;
      case OpKind::Binary:
        nabla::dispatch_pointwise(
            ops::name(op.binary), out, [&] { ops::cpu::binary(op.binary, arg(0), arg(1), out, op.alpha); },
            [&] {
              if (record_binary(op.binary, arg(0), arg(1), out, op.alpha)) return;
              flush_deferred();
              ops::cuda::binary(op.binary, arg(0), arg(1), out, op.alpha);
            });
        return;
      case OpKind::Where:
        nabla::dispatch_pointwise(
            "where", out, [&] { ops::cpu::where(arg(0), arg(1), arg(2), out); },
            [&] {
              if (record_where(arg(0), arg(1), arg(2), out)) return;
              flush_deferred();
              ops::cuda::where(arg(0), arg(1), arg(2), out);
            });
        return;
      case OpKind::Cast:
        nabla::dispatch_pointwise(
            "to", out, [&] { ops::cpu::copy(arg(0), out); },
            [&] {
              if (record_cast(arg(0), out)) return;
              flush_deferred();
              ops::cuda::copy(arg(0), out);
            });
        return;
      case OpKind::Reduce:
      case OpKind::Fill:
        break;
    }
    NABLA_ASSERT(false, "recompute: a plan holds {}",
                 op.kind == OpKind::Reduce ? "a reduction" : "an unknown op");
  }

  RecomputePlan plan_;
  std::vector<Tensor> leaves_;
  std::vector<uint32_t> versions_;
  mutable std::mutex mutex_;
  mutable Tensor kept_;
  mutable uint32_t kept_version_ = 0;
  mutable bool unseen_write_ = false;
};

}  // namespace

std::shared_ptr<const autograd::Recompute> make_recompute(RecomputePlan plan, std::vector<Tensor> leaves) {
  NABLA_ASSERT(!leaves.empty() && leaves.size() == plan.leaves.size() && !plan.region.empty(),
               "make_recompute: {} leaves for a plan of {} inputs and {} ops", leaves.size(),
               plan.leaves.size(), plan.region.ops().size());
  // make_shared of the non-const type, so enable_shared_from_this takes it.
  return std::make_shared<Recipe>(std::move(plan), std::move(leaves));
}

void keep_value(const autograd::Recompute& recipe, const Tensor& value) {
  static_cast<const Recipe&>(recipe).keep(value);
}

std::shared_ptr<const autograd::Recompute> recompute_for_backward(const Tensor& t) {
  Recorder* recorder = active_recorder();
  return recorder != nullptr ? recorder->recompute(t) : nullptr;
}

namespace {

// The live recipes with a leaf in t's storage.
std::vector<std::shared_ptr<const Recipe>> readers_of(const Tensor& t) {
  Readers& r = readers();
  std::vector<std::shared_ptr<const Recipe>> recipes;
  if (r.count.load(std::memory_order_relaxed) == 0 || !t.defined()) return recipes;
  const std::lock_guard lock(r.mutex);
  auto [first, last] = r.by_storage.equal_range(t.storage().get());
  for (auto it = first; it != last; ++it) {
    // A recipe being destroyed on another thread is skipped: nobody will unpack it.
    if (auto p = std::dynamic_pointer_cast<const Recipe>(it->second->weak_from_this().lock())) {
      recipes.push_back(std::move(p));
    }
  }
  return recipes;
}

}  // namespace

void before_inplace_write(const Tensor& t) {
  for (const auto& recipe : readers_of(t)) recipe->keep();
}

void after_unseen_write(const Tensor& t) {
  for (const auto& recipe : readers_of(t)) recipe->forget();
}

}  // namespace nabla::ops::fusion
