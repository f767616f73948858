// Saved values computed again in the backward (Note [Recomputed saved values] in
// ops/fusion/recompute.cpp): which values the planner computes again and from what, on hand-made
// regions; and the recipe's ops, run on the CPU, against the front ends computing the same value.
#include <gtest/gtest.h>

#include <set>

#include "nabla/nabla.h"
#include "nabla/ops/fusion/recompute.h"
#include "test_util.h"

namespace nabla::ops::fusion {
namespace {

// Keeping costs a value's bytes, or nothing for the values in `kept` (saved by other nodes).
KeepCost keeping(const Region& r, const std::set<int>& kept) {
  return [&r, kept](int v) -> std::optional<int64_t> {
    if (kept.count(v) != 0) return 0;
    return footprint(r.value(v));
  };
}

// RMSNorm as the plain LLaMA writes it, over a bf16 residual: x.to(f32) * rsqrt(mean(xf * xf) + eps) * w.
struct RmsNorm {
  Region r;
  int x, w, xf, sq, m, shifted, rstd, n, y;
  RmsNorm() {
    x = r.input(kBFloat16, {4, 8, 32});
    w = r.input(kFloat32, {32});
    xf = r.cast(x, kFloat32);
    sq = r.binary(BinaryOp::Mul, xf, xf);
    m = r.reduce(sq, {2}, /*keepdim=*/true, /*mean=*/true);
    shifted = r.unary(UnaryOp::AddScalar, m, {.a = 1e-5});
    rstd = r.unary(UnaryOp::Rsqrt, shifted);
    n = r.binary(BinaryOp::Mul, xf, rstd);
    y = r.binary(BinaryOp::Mul, n, w);
  }
};

TEST(FusionRecompute, RmsNormsProductIsComputedFromTheBf16InputAndTheStatistic) {
  RmsNorm norm;
  // x * x saved xf, x * rstd saved xf and rstd: n costs nothing more to compute than to keep.
  const auto plan = plan_recompute(norm.r, norm.n, keeping(norm.r, {norm.xf, norm.rstd}));
  ASSERT_TRUE(plan);
  EXPECT_EQ(plan->leaves, (std::vector<int>{norm.xf, norm.rstd}));
  EXPECT_EQ(plan->region.dump(), "%2 = mul(%0, %1) float32[4, 8, 32]\n");

  // Nothing kept yet: the float32 copy of x costs twice its bf16 source, so both come from x.
  const auto from_x = plan_recompute(norm.r, norm.n, keeping(norm.r, {}));
  ASSERT_TRUE(from_x);
  EXPECT_EQ(from_x->leaves, (std::vector<int>{norm.x, norm.rstd}));
  EXPECT_EQ(from_x->region.ops().size(), 2u);
  const auto xf = plan_recompute(norm.r, norm.xf, keeping(norm.r, {}));
  ASSERT_TRUE(xf);
  EXPECT_EQ(xf->leaves, (std::vector<int>{norm.x}));
}

TEST(FusionRecompute, ValuesNoCheaperToComputeThanToKeepAreKept) {
  RmsNorm norm;
  // rstd's only source is the mean, as large as itself; the mean is a reduction.
  EXPECT_FALSE(plan_recompute(norm.r, norm.rstd, keeping(norm.r, {})));
  EXPECT_FALSE(plan_recompute(norm.r, norm.m, keeping(norm.r, {})));
  // A bf16 cast of a float32 value is half its source.
  Region r;
  const int a = r.input(kFloat32, {64});
  const int half = r.cast(a, kBFloat16);
  EXPECT_FALSE(plan_recompute(r, half, keeping(r, {})));
  EXPECT_TRUE(plan_recompute(r, half, keeping(r, {a})));
}

TEST(FusionRecompute, SwigluKeepsTheGateNotItsActivation) {
  Region r;
  const int g = r.input(kBFloat16, {16, 64});
  const int u = r.input(kBFloat16, {16, 64});
  const int act = r.unary(UnaryOp::Silu, g);
  r.binary(BinaryOp::Mul, act, u);
  // silu saved g, so silu(g) comes from it; were g not saved, keeping either costs the same.
  const auto plan = plan_recompute(r, act, keeping(r, {g, u}));
  ASSERT_TRUE(plan);
  EXPECT_EQ(plan->leaves, (std::vector<int>{g}));
  EXPECT_FALSE(plan_recompute(r, act, keeping(r, {u})));
}

TEST(FusionRecompute, LongChainsAndValuesNothingHoldsAreKept) {
  Region r;
  const int x = r.input(kFloat32, {64});
  int v = x;
  for (UnaryOp op : {UnaryOp::Exp, UnaryOp::Neg, UnaryOp::Tanh, UnaryOp::Sigmoid, UnaryOp::Sin}) {
    v = r.unary(op, v);
  }
  // Three ops back reaches another float32 value of the chain, as costly as the last.
  EXPECT_FALSE(plan_recompute(r, v, keeping(r, {})));
  const auto short_chain = plan_recompute(r, r.op(2).result, keeping(r, {x}));
  ASSERT_TRUE(short_chain);
  EXPECT_EQ(short_chain->region.ops().size(), 3u);
  // A source that nothing holds any more cannot be a leaf.
  const KeepCost gone = [&](int u) -> std::optional<int64_t> {
    if (u == x) return std::nullopt;
    return footprint(r.value(u));
  };
  EXPECT_FALSE(plan_recompute(r, r.op(0).result, gone));
}

TEST(FusionRecompute, ARecipeRunOnTheCpuGivesTheFrontEndsBits) {
  RmsNorm norm;
  const auto plan = plan_recompute(norm.r, norm.n, keeping(norm.r, {}));
  ASSERT_TRUE(plan);
  const uint64_t seed = testing::test_seed();
  const Tensor x = testing::random_input({4, 8, 32}, seed, kBFloat16);
  const Tensor rstd = testing::random_input({4, 8, 1}, seed + 1, kFloat32).abs() + 0.5;
  const Tensor want = x.to(kFloat32) * rstd;
  const auto recipe = make_recompute(*plan, {x, rstd});
  EXPECT_TRUE(testing::all_close(recipe->run("MulBackward", 0), want, 0.0, 0.0));
  // Computed again each time it is unpacked (retain_graph), with the same bits.
  EXPECT_TRUE(testing::all_close(recipe->run("MulBackward", 0), want, 0.0, 0.0));
}

TEST(FusionRecompute, AnInPlaceWriteToALeafKeepsTheValueFirstAndOtherChangesAreRefused) {
  RmsNorm norm;
  const auto plan = plan_recompute(norm.r, norm.xf, keeping(norm.r, {}));
  ASSERT_TRUE(plan);
  Tensor x = testing::random_input({4, 8, 32}, testing::test_seed(), kBFloat16);
  const Tensor want = x.to(kFloat32);
  const auto recipe = make_recompute(*plan, {x});
  x.add_(1.0);  // through autograd's in-place check: the recipe keeps its value first
  EXPECT_TRUE(testing::all_close(recipe->run("ToCopyBackward", 0), want, 0.0, 0.0));

  Tensor y = testing::random_input({4, 8, 32}, testing::test_seed() + 7, kBFloat16);
  const auto other = make_recompute(*plan, {y});
  y.bump_version();  // a write autograd did not see
  try {
    other->run("ToCopyBackward", 3);
    FAIL() << "a recipe ran over a leaf that changed after it was saved";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("ToCopyBackward: saved tensor #3"), std::string::npos) << what;
    EXPECT_NE(what.find("modified by an in-place operation"), std::string::npos) << what;
  }
}

TEST(FusionRecompute, AKeptValueIsVersionCheckedAndAnUnseenWriteIsRefused) {
  RmsNorm norm;
  const auto plan = plan_recompute(norm.r, norm.xf, keeping(norm.r, {}));
  ASSERT_TRUE(plan);
  const Tensor x = testing::random_input({4, 8, 32}, testing::test_seed(), kBFloat16);
  // A value saved again is kept as it is; unpacking gives a tensor of its own over it, and a
  // write to it afterwards is refused as for any saved tensor.
  const auto kept = make_recompute(*plan, {x});
  Tensor value = x.to(kFloat32);
  keep_value(*kept, value);
  const Tensor got = kept->run("MmBackward", 1);
  EXPECT_FALSE(got.is_same(value));
  EXPECT_EQ(got.data_ptr(), value.data_ptr());
  value.add_(1.0);
  EXPECT_NABLA_ERROR(kept->run("MmBackward", 1), "MmBackward: saved tensor #1", "modified by an in-place");

  // A leaf a custom function's kernel wrote (no version bump, no warning first) cannot give it.
  const auto other = make_recompute(*plan, {x});
  after_unseen_write(x);
  EXPECT_NABLA_ERROR(other->run("MulBackward", 0), "MulBackward: saved tensor #0", "custom function");
}

}  // namespace
}  // namespace nabla::ops::fusion
