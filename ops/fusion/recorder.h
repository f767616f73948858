// Internal (ops). The step compiler's recorder: while one is active on a thread, the pointwise
// front ends hand it their CUDA ops instead of launching them, and it runs what it holds, fused,
// when something needs the results (Note [Deferred launches] in core/deferred.h).
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <unordered_map>
#include <vector>

#include "nabla/core/autograd/node.h"
#include "nabla/core/cuda/stream.h"
#include "nabla/core/deferred.h"
#include "nabla/core/tensor.h"
#include "nabla/ops/fusion.h"
#include "nabla/ops/fusion/region.h"

namespace nabla::ops::fusion {

class Recorder final : public DeferredLaunches {
 public:
  Recorder() = default;
  ~Recorder() override;
  Recorder(const Recorder&) = delete;
  Recorder& operator=(const Recorder&) = delete;

  // Each takes the op if it can hold it (CUDA tensors, `out` freshly made by the front end and
  // read by nothing yet) and returns whether it did; when not, the caller launches it as usual.
  bool unary(UnaryOp op, const Tensor& x, const Tensor& out, UnaryParams params);
  bool binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out, double alpha);
  bool where(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out);
  bool cast(const Tensor& src, const Tensor& out);
  // The sum or mean of a held result over `dims` (ascending), into the front end's fresh
  // contiguous `out`, where a fused kernel can read it in place (fusion::reduce_layout).
  bool reduce(const Tensor& x, const Shape& dims, bool mean, const Tensor& out);
  // cat(inputs, dim) into the front end's fresh `out`, when a piece is a held result: each piece
  // is recorded as a copy into its slot of out, which its group then writes directly (Note
  // [Concatenation in place] in recorder_pieces.cpp). All pieces or none.
  bool cat(const TensorList& inputs, int64_t dim, const Tensor& out);
  // The gradient of a slice, `g` (a held result) at [start, start + g.size(dim)) of the front
  // end's fresh `out` and zeros around it, recorded as pieces of out (Note [Padded slices]).
  bool pad(const Tensor& g, int64_t dim, int64_t start, const Tensor& out);
  // Whether t is a result held now (not yet run).
  bool holds(const Tensor& t) const {
    const int v = result_of(t);
    return v >= 0 && region_.value(v).producer >= 0;
  }

  // A launch of something that is not pointwise, held until the next flush so that a ReLU read
  // first may fold into it (Note [Batch norm and its ReLU] in recorder_held.cpp). `run(dst, relu, residual)`
  // writes the values of `out`, or with relu their ReLU (of their sum with a defined residual),
  // into dst (out itself, or the ReLU's result). What is held is flushed first; false where the launch cannot
  // be held (the caller then launches it as usual).
  struct HeldLaunch {
    Tensor out;
    std::function<void(const Tensor& dst, bool relu, const Tensor& residual)> run;
    // Whether run also takes relu(out + residual) (residual then defined, laid out as out):
    // values rounded once, where the ops rounded out and the sum.
    bool takes_residual = false;
  };
  bool hold(HeldLaunch launch);
  // relu_(t) of the held launch's output t, before anything read t: the launch writes the ReLU
  // (true), and the caller launches nothing. False otherwise.
  bool fold_relu_in_place(const Tensor& t);
  // The incoming gradient and the ReLU output a held relu backward (threshold_backward) computes
  // `grad` from, when `grad` is one and both are at hand; a backward that masks by the ReLU
  // itself reads them instead, and `grad`, dropped, is then never computed.
  std::optional<std::pair<Tensor, Tensor>> relu_backward_parts(const Tensor& grad);

  // What autograd saves `t` as (Note [Recomputed saved values] in recompute.cpp): a recipe when
  // t is a held result cheaper to compute again than to keep; null when t is kept as it is.
  std::shared_ptr<const autograd::Recompute> recompute(const Tensor& t);

  // Plans what is held (a result someone still holds is live out), runs it, and forgets it.
  void flush() override;

  const FusionStats& stats() const { return stats_; }

 private:
  // The most ops held at once: a step's pointwise chains are short, and this bounds the plan.
  static constexpr size_t kMaxHeldOps = 1024;

  bool accepts(std::initializer_list<const Tensor*> inputs, const Tensor& out);
  int result_of(const Tensor& t) const { return find_value(by_impl_, slots_, t); }
  // A cast of a cat output recorded here: the casts of its pieces into the slots of `out`.
  struct CatRecord;
  bool cast_pieces(const CatRecord& cat, const Tensor& out);
  // a (op) b of two outputs recorded in pieces along one dim at the same offsets: the op of
  // each pair of pieces, into the slots of `out` (Note [Padded slices]).
  bool binary_pieces(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out, double alpha);
  const CatRecord* pieces_of(const Tensor& t) const;
  // A slice of a held result, read by a new op: recorded as the ops computing that slice alone
  // (Note [Slices of held results]); false when it cannot be (the caller flushes).
  bool push_down(const Tensor& t);
  bool push_down_expand(const Tensor& t);
  // Whether value w is a held result on t's storage, of t's dtype and rank (a view's candidate).
  bool viewed_result(size_t w, const Tensor& t) const;
  // A result no tensor holds (a slice's intermediate in push_down): never live out.
  int add_virtual(Op op, DType dtype, const Shape& sizes, const Shape& strides);
  void remember_flushed();
  void run_held();
  int only_reader(int v) const;
  Tensor relu_reading(int v) const;
  int value_of(const Tensor& t);
  void add(Op op, const Tensor& out);

  // Per value of region_: an input's tensor, held; a result's, watched (Note [Intermediates
  // nobody holds]). In previous_, every value is watched, with its storage's version at the flush.
  struct Slot {
    Tensor tensor{};
    std::weak_ptr<TensorImpl> impl{};
    std::weak_ptr<Storage> storage{};
    int64_t offset = 0;
    uint32_t version = 0;
  };
  using Recipes = std::unordered_map<int, std::weak_ptr<const autograd::Recompute>>;
  // What recompute() knows of a region: values autograd keeps anyway (saved as they are, or
  // leaves of a recipe), and the recipes made.
  struct Flushed;
  static int find_value(const std::unordered_map<const TensorImpl*, int>& by_impl,
                        const std::vector<Slot>& slots, const Tensor& t);
  static Tensor tensor_in(const Region& region, const std::vector<Slot>& slots, int v);
  std::shared_ptr<const autograd::Recompute> recompute_value(const Region& region,
                                                             const std::vector<Slot>& slots,
                                                             std::set<int>& kept, Recipes& recipes, int v,
                                                             bool flushed, const Tensor& t);

  Region region_;
  std::vector<Slot> slots_;
  std::unordered_map<const TensorImpl*, int> by_impl_;  // by tensor (checked against the slot)
  std::unordered_map<const Storage*, int> by_storage_;  // results, by buffer (likewise)
  // The outputs of cats recorded whole in this region: their pieces' values and offsets.
  struct CatRecord {
    std::weak_ptr<TensorImpl> out;
    int64_t dim = 0;
    std::vector<std::pair<int, int64_t>> pieces;  // (value, offset along dim)
  };
  std::unordered_map<const TensorImpl*, CatRecord> cats_;
  std::set<int> kept_;
  Recipes recipes_;
  // The region flushed last: a value it wrote that autograd saves afterwards (a matmul's input)
  // may still be computed again from values kept anyway (Note [Recomputed saved values]).
  struct Flushed {
    Region region;
    std::vector<Slot> slots;
    std::unordered_map<const TensorImpl*, int> by_impl;
    std::set<int> kept;
    Recipes recipes;
  };
  Flushed previous_;
  std::optional<HeldLaunch> held_;  // runs first at the flush, before region_
  bool held_relu_ = false;          // ... writing the ReLU of its values (fold_relu_in_place)
  Device device_ = Device::cpu();   // of every tensor held
  nabla::cuda::Stream stream_;      // the ops were recorded on
  bool flushing_ = false;
  FusionStats stats_;
};

// The recorder active on this thread, or null.
Recorder* active_recorder();

// What the front ends call: the active recorder takes the op, or nothing does (false).
bool record_unary(UnaryOp op, const Tensor& x, const Tensor& out, UnaryParams params);
bool record_binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out, double alpha);
bool record_where(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out);
bool record_cast(const Tensor& src, const Tensor& out);
bool record_reduce(const Tensor& x, const Shape& dims, bool mean, const Tensor& out);
bool record_cat(const TensorList& inputs, int64_t dim, const Tensor& out);
bool record_pad(const Tensor& g, int64_t dim, int64_t start, const Tensor& out);
// Whether the active recorder holds t as a result not yet run (false without one).
bool holds_result(const Tensor& t);
// The active recorder's hold, relu_backward_parts and fold_relu_in_place, or nothing (false, nullopt).
bool hold_launch(Recorder::HeldLaunch launch);
std::optional<std::pair<Tensor, Tensor>> relu_backward_parts(const Tensor& grad);
bool fold_relu_in_place(const Tensor& t);

}  // namespace nabla::ops::fusion
