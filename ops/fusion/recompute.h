// Internal (ops). Saved values the step compiler computes again in the backward instead of
// keeping them (Note [Recomputed saved values] in recompute.cpp).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "nabla/core/autograd/node.h"
#include "nabla/core/tensor.h"
#include "nabla/ops/fusion/region.h"

namespace nabla::ops::fusion {

// How one value of a region is computed again from others, its leaves.
struct RecomputePlan {
  Region region;            // one input per leaf (in `leaves` order), then the ops in program order;
                            // the last op's result is the value
  std::vector<int> leaves;  // the values of the recorded region the inputs stand for
};

// The most ops a plan computes again, and how far back from the value it looks.
inline constexpr int kMaxRecomputedOps = 4;
inline constexpr int kMaxRecomputeDepth = 3;

// What keeping value v of the region until the backward would cost in bytes: 0 when it is kept
// anyway (saved already), nullopt when it cannot be kept (nothing holds it any more).
using KeepCost = std::function<std::optional<int64_t>(int v)>;

// The bytes a value's layout covers (a broadcast dim counts once).
int64_t footprint(const Value& v);

// The cheapest plan computing `value` (a result of the region) again from values that cost less
// to keep than it does, through at most kMaxRecomputedOps pointwise ops; nullopt when keeping
// the value itself is as cheap, or it cannot be computed again (a reduction, an unfusible op).
std::optional<RecomputePlan> plan_recompute(const Region& region, int value, const KeepCost& keep_cost);

// A saved value kept as its plan and the leaves' tensors: autograd's unpack runs the plan's ops
// again (recorded when a step compiler is active on the thread, else launched at once).
std::shared_ptr<const autograd::Recompute> make_recompute(RecomputePlan plan, std::vector<Tensor> leaves);

// Makes a recipe (from make_recompute) keep `value`, its value, instead of computing it again.
void keep_value(const autograd::Recompute& recipe, const Tensor& value);

// Called before `t`'s memory is written in place: every recipe reading it computes its value
// now and keeps it, so the write cannot change a gradient.
void before_inplace_write(const Tensor& t);

// Called after `t`'s memory was written where nabla could not call before_inplace_write first (a
// custom function's own kernel): the recipes reading it refuse to give their value at unpack.
void after_unseen_write(const Tensor& t);

// The recipe to save `t` as when the thread's recorder holds it and can compute it again more
// cheaply than keeping it; null otherwise (autograd then keeps the tensor).
std::shared_ptr<const autograd::Recompute> recompute_for_backward(const Tensor& t);

}  // namespace nabla::ops::fusion
