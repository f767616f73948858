// The step compiler's planner and code generator on hand-made regions (ops/fusion): which ops
// become one kernel, what it reads and writes, and the CUDA C++ it is written as, against golden
// files in tests/ops/golden/fusion/. Set NABLA_UPDATE_GOLDEN=1 to rewrite them after a deliberate
// change to the generator, and review the diff.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <limits>
#include <sstream>

#include "nabla/nabla.h"
#include "nabla/ops/fusion.h"
#include "nabla/ops/fusion/codegen.h"
#include "nabla/ops/fusion/compile.h"
#include "nabla/ops/fusion/plan.h"
#include "test_paths.h"
#include "test_util.h"

namespace nabla::ops::fusion {
namespace {

using testing::source_file;

std::vector<int> list(std::initializer_list<int> xs) {
  return xs;
}

void expect_golden(const std::string& name, const std::string& text) {
  const auto path = source_file("tests/ops/golden/fusion/" + name);
  const char* update = std::getenv("NABLA_UPDATE_GOLDEN");
  if (update != nullptr && *update != '\0' && *update != '0') {
    std::ofstream(path) << text;
    GTEST_SKIP() << "rewrote " << path;
  }
  std::ifstream in(path);
  ASSERT_TRUE(in.good()) << "no golden file " << path << "; run with NABLA_UPDATE_GOLDEN=1 to write it";
  std::stringstream want;
  want << in.rdbuf();
  EXPECT_EQ(text, want.str()) << "the generated source differs from " << path;
}

// y = gelu(x + b) in bfloat16, as a Linear's bias and GELU write it, with x + b saved for the
// backward (live out) and an unused x * 2 that nothing reads.
struct BiasGelu {
  Region r;
  int x, b, sum, y, unused;
  BiasGelu() {
    x = r.input(kBFloat16, {4, 8});
    b = r.input(kBFloat16, {8});
    sum = r.binary(BinaryOp::Add, x, b);
    unused = r.unary(UnaryOp::MulScalar, x, {.a = 2});
    y = r.unary(UnaryOp::Gelu, sum);
    r.mark_live_out(sum);
    r.mark_live_out(y);
  }
};

TEST(FusionPlan, AChainIsOneGroupWritingOnlyWhatIsReadAfterIt) {
  Region r;
  const int x = r.input(kFloat32, {16, 32});
  const int a = r.unary(UnaryOp::MulScalar, x, {.a = 0.5});
  const int b = r.unary(UnaryOp::Tanh, a);
  const int c = r.unary(UnaryOp::AddScalar, b, {.a = 1});
  const int y = r.binary(BinaryOp::Mul, c, a);
  r.mark_live_out(y);
  const Plan plan = plan_groups(r);
  ASSERT_EQ(plan.groups.size(), 1u) << dump(plan);
  const Group& g = plan.groups[0];
  EXPECT_TRUE(g.fused);
  EXPECT_EQ(g.ops, list({0, 1, 2, 3}));
  EXPECT_EQ(g.inputs, list({x}));
  EXPECT_EQ(g.outputs, list({y}));
  EXPECT_TRUE(plan.dead.empty());
}

TEST(FusionPlan, SavedValuesAreWrittenAndUnreadOpsAreDropped) {
  BiasGelu m;
  const Plan plan = plan_groups(m.r);
  ASSERT_EQ(plan.groups.size(), 1u) << dump(plan);
  EXPECT_EQ(plan.groups[0].outputs, list({m.sum, m.y}));
  EXPECT_EQ(plan.groups[0].inputs, list({m.x, m.b}));
  EXPECT_EQ(plan.dead, list({1}));  // x * 2
  EXPECT_EQ(dump(plan), "group 0 fused [4, 8]: ops 0 2, in %0 %1, out %2 %4\ndead: 1\n");
}

// A batch norm's ReLU, folded into the batch norm's kernel (Note [Batch norm and its ReLU]):
// its result becomes an input the rest of the region reads, and the ops after it keep their
// values' numbers.
TEST(FusionPlan, ADetachedResultIsReadAsAnInput) {
  Region r;
  const int t = r.input(kFloat16, {4, 8});
  const int relu = r.unary(UnaryOp::Relu, t);
  const int scaled = r.unary(UnaryOp::MulScalar, relu, {.a = 2});
  const int y = r.unary(UnaryOp::Tanh, scaled);
  r.detach(relu);
  r.mark_live_out(y);
  ASSERT_EQ(r.ops().size(), 2u) << r.dump();
  EXPECT_EQ(r.value(relu).producer, -1);
  EXPECT_EQ(r.value(scaled).producer, 0);
  EXPECT_EQ(r.value(y).producer, 1);
  EXPECT_EQ(r.op(0).args, list({relu}));
  const Plan plan = plan_groups(r);
  ASSERT_EQ(plan.groups.size(), 1u) << dump(plan);
  EXPECT_EQ(plan.groups[0].inputs, list({relu}));  // t is read by nothing now
  EXPECT_EQ(plan.groups[0].outputs, list({y}));
  r.detach(relu);  // an input already: nothing changes
  EXPECT_EQ(r.ops().size(), 2u);
}

TEST(FusionPlan, AValueOfAnotherShapeIsItsOwnGroupAndWrittenForItsReaders) {
  Region r;
  const int x = r.input(kFloat32, {8, 4});
  const int w = r.input(kFloat32, {4});
  const int w2 = r.unary(UnaryOp::MulScalar, w, {.a = 3});  // [4], read by the [8, 4] group
  const int y = r.binary(BinaryOp::Mul, x, w2);
  const int z = r.unary(UnaryOp::Relu, y);
  r.mark_live_out(z);
  const Plan plan = plan_groups(r);
  ASSERT_EQ(plan.groups.size(), 2u) << dump(plan);
  EXPECT_FALSE(plan.groups[0].fused);  // one op: the eager kernel runs it
  EXPECT_EQ(plan.groups[0].outputs, list({w2}));
  EXPECT_TRUE(plan.groups[1].fused);
  EXPECT_EQ(plan.groups[1].inputs, list({x, w2}));
  EXPECT_EQ(plan.groups[1].outputs, list({z}));
}

TEST(FusionPlan, AnOpReadingALaterGroupNeverJoinsAnEarlierOne) {
  // a -> (int64 round trip, which the compiler leaves alone) -> added back to a: the add cannot
  // join a's group, which runs before the round trip it reads.
  Region r;
  const int x = r.input(kFloat32, {8});
  const int a = r.unary(UnaryOp::Exp, x);
  const int b = r.unary(UnaryOp::Neg, a);
  const int as_int = r.cast(b, kInt64);
  const int back = r.cast(as_int, kFloat32);
  const int y = r.binary(BinaryOp::Add, back, a);
  r.mark_live_out(y);
  const Plan plan = plan_groups(r);
  ASSERT_EQ(plan.groups.size(), 4u) << dump(plan);
  EXPECT_EQ(plan.groups[0].ops, list({0, 1}));
  EXPECT_EQ(plan.groups[0].outputs, list({b}));
  EXPECT_FALSE(plan.groups[1].fused);
  EXPECT_FALSE(plan.groups[2].fused);
  // The add computes a = exp(x) again rather than read it (Note [Recomputed values]).
  EXPECT_EQ(plan.groups[3].ops, list({0, 4}));
  EXPECT_EQ(plan.groups[3].inputs, list({x, back}));
}

TEST(FusionPlan, IndependentChainsOfOneShapeShareAKernel) {
  Region r;
  const int x = r.input(kFloat16, {2, 64});
  const int y = r.input(kFloat16, {2, 64});
  const int a = r.unary(UnaryOp::Silu, x);
  const int b = r.unary(UnaryOp::Sigmoid, y);
  const int c = r.unary(UnaryOp::Neg, a);
  const int d = r.unary(UnaryOp::Neg, b);
  r.mark_live_out(c);
  r.mark_live_out(d);
  const Plan plan = plan_groups(r);
  ASSERT_EQ(plan.groups.size(), 1u) << dump(plan);
  EXPECT_EQ(plan.groups[0].outputs, list({c, d}));
}

TEST(FusionPlan, FusesMixedFloatPairsMasksAndCastsButNotIntegers) {
  Region r;
  const int stream = r.input(kFloat32, {4, 4});
  const int proj = r.input(kBFloat16, {4, 4});
  const int sum = r.binary(BinaryOp::Add, stream, proj);  // float32 + bfloat16 -> float32
  const int mask = r.unary(UnaryOp::GtScalar, sum, {.a = 0});
  const int zero = r.input(kFloat32, {});
  const int kept = r.where(mask, sum, zero);
  const int half = r.cast(kept, kBFloat16);
  r.mark_live_out(half);
  for (const Op& op : r.ops()) EXPECT_TRUE(fusible(r, op)) << describe(r, op);
  const Plan plan = plan_groups(r);
  ASSERT_EQ(plan.groups.size(), 1u) << dump(plan);

  Region ints;
  const int i = ints.input(kInt64, {4});
  const int j = ints.unary(UnaryOp::Neg, i);
  EXPECT_FALSE(fusible(ints, ints.op(0))) << describe(ints, ints.op(0));
  ints.mark_live_out(j);
  EXPECT_FALSE(plan_groups(ints).groups.at(0).fused);
}

// RMSNorm's forward as the plain LLaMA writes it: float32 statistics of a bfloat16 stream.
struct RmsNorm {
  Region r;
  int x, w, xf, sq, ms, eps, rstd, n, nb, y;
  explicit RmsNorm(const Shape& sizes = {4, 16, 64}) {
    x = r.input(kBFloat16, sizes);
    w = r.input(kBFloat16, {sizes.back()});
    xf = r.cast(x, kFloat32);
    sq = r.binary(BinaryOp::Mul, xf, xf);
    ms = r.reduce(sq, {2}, /*keepdim=*/true, /*mean=*/true);
    eps = r.unary(UnaryOp::AddScalar, ms, {.a = 1e-6});
    rstd = r.unary(UnaryOp::Rsqrt, eps);
    n = r.binary(BinaryOp::Mul, xf, rstd);
    nb = r.cast(n, kBFloat16);
    y = r.binary(BinaryOp::Mul, nb, w);
    r.mark_live_out(rstd);
    r.mark_live_out(y);
  }
};

TEST(FusionPlan, ANormIsOneKernelComputingTheRowsStatisticThenItsElements) {
  RmsNorm m;
  const Plan plan = plan_groups(m.r);
  // Note [One-pass rows]: the mean runs in the kernel of its input; `+ eps` and `rsqrt` once per
  // row after the fold, then x * rstd * w per element. Only rstd (saved) and y are written.
  EXPECT_EQ(dump(plan),
            "group 0 fused [4, 16, 64]: ops 0 1 2 3 4 5 6 7, in %0 %1, out %6 %9, reduce 2, rows 3 4\n");
  const auto layout = reduce_layout(m.r, m.r.op(2));
  ASSERT_TRUE(layout.has_value());
  EXPECT_EQ(layout->a, 1);
  EXPECT_EQ(layout->o, 64);
  EXPECT_EQ(layout->b, 64);
  EXPECT_EQ(layout->i, 1);
}

TEST(FusionPlan, ANormsBackwardIsAWeightSumAndOneRowKernel) {
  // RMSNorm's backward as autograd records it for y = (x * rstd).bf16() * w, from the saved rstd
  // and normalized rows nb. The weight's gradient sums g * nb over rows (columns); the statistic's
  // gradient sums dn * x over each row; after it, per row, rsqrt's and the mean's backward (which
  // read the saved rstd), then per element the expanded copy of the mean's gradient (as
  // Recorder::push_down_expand records it) and dx.
  Region r;
  const Shape sizes{4, 16, 64};
  const int g = r.input(kBFloat16, sizes);
  const int w = r.input(kBFloat16, {64});
  const int x = r.input(kBFloat16, sizes);
  const int rstd = r.input(kFloat32, {4, 16, 1});
  const int nb = r.input(kBFloat16, sizes);
  const int dnb = r.binary(BinaryOp::Mul, g, w);
  const int dw = r.reduce(r.binary(BinaryOp::Mul, g, nb), {0, 1}, /*keepdim=*/true, /*mean=*/false);
  const int dn = r.cast(dnb, kFloat32);
  const int xf = r.cast(x, kFloat32);
  const int dxf1 = r.binary(BinaryOp::Mul, dn, rstd);
  const int dr = r.reduce(r.binary(BinaryOp::Mul, dn, xf), {2}, /*keepdim=*/true, /*mean=*/false);
  const int t = r.binary(BinaryOp::Mul, r.binary(BinaryOp::Mul, dr, rstd), rstd);
  const int dms = r.unary(UnaryOp::MulScalar, r.unary(UnaryOp::MulScalar, t, {.a = -0.5}), {.a = 1.0 / 64});
  const Op copy{.kind = OpKind::Cast, .args = {dms}};
  const int dsq = r.add(copy, kFloat32, sizes, {16, 1, 0});
  const int a = r.binary(BinaryOp::Mul, dsq, xf);
  const int dx = r.cast(r.binary(BinaryOp::Add, dxf1, r.binary(BinaryOp::Add, a, a)), kBFloat16);
  r.mark_live_out(dw);
  r.mark_live_out(dx);
  const Plan plan = plan_groups(r);
  ASSERT_EQ(plan.groups.size(), 2u) << dump(plan);
  EXPECT_EQ(plan.groups[0].outputs, list({dw})) << dump(plan);
  EXPECT_EQ(plan.groups[1].reduce, r.value(dr).producer) << dump(plan);
  EXPECT_EQ(plan.groups[1].row_ops.size(), 4u) << dump(plan);
  EXPECT_EQ(plan.groups[1].outputs, list({dx})) << dump(plan);
  EXPECT_TRUE(plan.groups[0].fused && plan.groups[1].fused);
  const KernelSource k = generate_kernel(r, plan.groups[1]);
  EXPECT_TRUE(k.one_pass);
  EXPECT_EQ(k.operands.front(), dx);
  expect_golden("rms_backward_one_pass_bf16.cu", k.source);
}

TEST(FusionPlan, AMeanOfLongRowsTooFewToFillTheGpuClosesItsGroup) {
  // 9000 elements in each of 4 rows: the eager kernel may split a row over several blocks
  // (rows_never_split), so nothing can run after the fold (Note [One-pass rows]). x*x is never
  // written, nor the float32 copy of x: the normalization after the statistics converts x again
  // (Note [Recomputed values]).
  RmsNorm m({2, 2, 9000});
  EXPECT_EQ(dump(plan_groups(m.r)),
            "group 0 fused [2, 2, 9000]: ops 0 1 2, in %0, out %4, reduce 2\n"
            "group 1 fused [2, 2, 1]: ops 3 4, in %4, out %6\n"
            "group 2 fused [2, 2, 9000]: ops 0 5 6 7, in %0 %6 %1, out %9\n");
  EXPECT_EQ(dump(plan_groups(RmsNorm({2, 2, 8192}).r)).find("group 1"), std::string::npos)
      << "rows of 8192 never split: one pass";
}

TEST(FusionPlan, AComposedLayerNormKeepsItsVarianceFused) {
  // mean, then the variance of x - mean, then the normalization: x - mean feeds the second
  // reduction, so it stays out of the first one's row phase and both reductions are fused; the
  // second group takes the normalization as its epilogue.
  Region r;
  const int x = r.input(kBFloat16, {8, 64});
  const int xf = r.cast(x, kFloat32);
  const int m = r.reduce(xf, {1}, /*keepdim=*/true, /*mean=*/true);
  const int xc = r.binary(BinaryOp::Sub, xf, m);
  const int v = r.reduce(r.binary(BinaryOp::Mul, xc, xc), {1}, /*keepdim=*/true, /*mean=*/true);
  const int rstd = r.unary(UnaryOp::Rsqrt, r.unary(UnaryOp::AddScalar, v, {.a = 1e-5}));
  r.mark_live_out(r.cast(r.binary(BinaryOp::Mul, xc, rstd), kBFloat16));
  const Plan plan = plan_groups(r);
  ASSERT_EQ(plan.groups.size(), 2u) << dump(plan);
  EXPECT_TRUE(plan.groups[0].fused && plan.groups[1].fused) << dump(plan);
  EXPECT_EQ(plan.groups[0].reduce, r.value(m).producer) << dump(plan);
  EXPECT_EQ(plan.groups[1].reduce, r.value(v).producer) << dump(plan);
  EXPECT_EQ(plan.groups[1].row_ops.size(), 2u) << dump(plan);
}

TEST(FusionPlan, AWeightSumRecordedAfterARowPhaseKeepsItsOwnGroup) {
  // g * n reads neither a row value nor the epilogue: it does not join the row phase, so its
  // column sum joins its group and is fused.
  Region r;
  const int x = r.input(kFloat32, {16, 32});
  const int g = r.input(kFloat32, {16, 32});
  const int n = r.input(kFloat32, {16, 32});
  const int s = r.reduce(r.unary(UnaryOp::Exp, x), {1}, /*keepdim=*/true, /*mean=*/false);
  const int y = r.binary(BinaryOp::Mul, x, s);
  const int dw = r.reduce(r.binary(BinaryOp::Mul, g, n), {0}, /*keepdim=*/true, /*mean=*/false);
  r.mark_live_out(y);
  r.mark_live_out(dw);
  EXPECT_EQ(dump(plan_groups(r)),
            "group 0 fused [16, 32]: ops 0 1 2, in %0, out %5, reduce 1\n"
            "group 1 fused [16, 32]: ops 3 4, in %1 %2, out %7, reduce 4\n");
}

TEST(FusionPlan, ReductionsOfInputsOrOfPerChannelStatisticsRunAsTheEagerKernel) {
  Region r;
  const int x = r.input(kFloat32, {8, 4, 16, 16});
  const int direct = r.reduce(x, {1}, /*keepdim=*/false, /*mean=*/false);  // nothing to fuse into
  const int sq = r.binary(BinaryOp::Mul, x, x);
  // NCHW per-channel: (A, O, B, I) = (8, 4, 256, 1), which the eager kernel reduces in two stages.
  const int stats = r.reduce(sq, {0, 2, 3}, /*keepdim=*/true, /*mean=*/true);
  r.mark_live_out(direct);
  r.mark_live_out(stats);
  EXPECT_FALSE(reduce_layout(r, r.op(2)).has_value());
  const Plan plan = plan_groups(r);
  ASSERT_EQ(plan.groups.size(), 3u) << dump(plan);
  EXPECT_FALSE(plan.groups[0].fused);
  EXPECT_FALSE(plan.groups[1].fused);  // the product, alone once the mean cannot join it
  EXPECT_FALSE(plan.groups[2].fused);
  EXPECT_EQ(plan.groups[1].outputs, list({sq}));
}

TEST(FusionPlan, AColumnSumOfAWeightsGradientIsFused) {
  // sum_to(g * xhat, [1, 1, 32]) as autograd writes a broadcast weight's gradient.
  Region r;
  const int g = r.input(kFloat32, {8, 16, 32});
  const int xhat = r.input(kFloat32, {8, 16, 32});
  const int prod = r.binary(BinaryOp::Mul, g, xhat);
  const int dw = r.reduce(prod, {0, 1}, /*keepdim=*/true, /*mean=*/false);
  r.mark_live_out(dw);
  const Plan plan = plan_groups(r);
  EXPECT_EQ(dump(plan), "group 0 fused [8, 16, 32]: ops 0 1, in %0 %1, out %3, reduce 1\n");
  const auto layout = reduce_layout(r, r.op(1));
  ASSERT_TRUE(layout.has_value());
  EXPECT_EQ(layout->b, 128);
  EXPECT_EQ(layout->i, 32);
}

TEST(FusionPlan, AValueEveryLaterReaderCanComputeIsComputedAgainNotWritten) {
  // A norm's backward, shortened: g * w feeds the statistic's sum and, after it, dx. Summed over
  // dim 1 (columns), so the sum's kernel cannot compute dx after it (Note [One-pass rows]).
  Region r;
  const int g = r.input(kFloat32, {4, 8, 32});
  const int w = r.input(kFloat32, {32});
  const int x = r.input(kFloat32, {4, 8, 32});
  const int gw = r.binary(BinaryOp::Mul, g, w);
  const int s = r.reduce(r.binary(BinaryOp::Mul, gw, x), {1}, /*keepdim=*/true, /*mean=*/false);
  const int ds = r.unary(UnaryOp::MulScalar, s, {.a = -0.5});
  const int dx = r.binary(BinaryOp::Add, gw, r.binary(BinaryOp::Mul, x, ds));
  r.mark_live_out(dx);
  EXPECT_EQ(dump(plan_groups(r)),
            "group 0 fused [4, 8, 32]: ops 0 1 2, in %0 %1 %2, out %5, reduce 2\n"
            "group 1 eager [4, 1, 32]: ops 3, in %5, out %6\n"
            "group 2 fused [4, 8, 32]: ops 0 4 5, in %0 %1 %2 %6, out %8\n");

  // Saved for the backward (live out), it is written once and read.
  r.mark_live_out(gw);
  const Plan saved = plan_groups(r);
  EXPECT_EQ(saved.groups.at(0).outputs, list({gw, s}));
  EXPECT_EQ(saved.groups.at(2).ops, list({4, 5}));
}

TEST(FusionPlan, AValueAReaderCannotComputeStaysWritten) {
  Region r;
  const int x = r.input(kFloat32, {16});
  const int a = r.unary(UnaryOp::Exp, x);
  // Without keepdim: no one-pass rows (Note [One-pass rows]), so y is another group's.
  const int s = r.reduce(r.unary(UnaryOp::Neg, a), {0}, /*keepdim=*/false, /*mean=*/false);
  const int y = r.binary(BinaryOp::Mul, a, s);  // could compute a again
  const int as_int = r.cast(a, kInt64);         // cannot: an eager op reads a
  r.mark_live_out(y);
  r.mark_live_out(as_int);
  const Plan plan = plan_groups(r);
  EXPECT_EQ(plan.groups.at(0).outputs, list({a, s})) << dump(plan);
}

TEST(FusionPlan, LongChainsAreReadNotRecomputedAndCopiesStayOnlyWhereRead) {
  // w needs four ops from x: past the three a reader may copy, so it is written and read.
  Region r;
  const int x = r.input(kFloat32, {16});
  const int a = r.unary(UnaryOp::Exp, x);
  const int b = r.unary(UnaryOp::Neg, a);
  const int c = r.unary(UnaryOp::Tanh, b);
  const int w = r.unary(UnaryOp::Sigmoid, c);
  const int s = r.reduce(r.unary(UnaryOp::MulScalar, w, {.a = 2}), {0}, /*keepdim=*/false, /*mean=*/false);
  r.mark_live_out(r.binary(BinaryOp::Add, w, s));
  const Plan plan = plan_groups(r);
  EXPECT_EQ(plan.groups.at(0).outputs, list({w, s})) << dump(plan);

  // b is read by an eager op (written by its own group) and copied into the reader of c, whose
  // own group then needs neither copy: every fused group writes something.
  Region q;
  const int qx = q.input(kFloat32, {16});
  const int qa = q.unary(UnaryOp::Exp, qx);
  const int qb = q.unary(UnaryOp::Neg, qa);
  const int qs = q.reduce(q.unary(UnaryOp::Tanh, qb), {0}, /*keepdim=*/false, /*mean=*/false);
  const int as_int = q.cast(qb, kInt64);
  const int qc = q.unary(UnaryOp::Sin, qb);
  q.mark_live_out(as_int);
  q.mark_live_out(q.binary(BinaryOp::Add, qc, qs));
  const Plan qplan = plan_groups(q);
  for (const Group& g : qplan.groups) {
    EXPECT_FALSE(g.fused && g.outputs.empty()) << dump(qplan);
  }
  EXPECT_EQ(qplan.groups.at(0).outputs, list({qb, qs})) << dump(qplan);
}

TEST(FusionCodegen, BiasGeluMatchesItsGoldenFile) {
  BiasGelu m;
  const Plan plan = plan_groups(m.r);
  const KernelSource k = generate_kernel(m.r, plan.groups.at(0));
  EXPECT_EQ(k.operands, list({m.sum, m.y, m.x, m.b}));
  EXPECT_EQ(k.numel, 32);
  EXPECT_TRUE(k.index32);
  expect_golden("bias_gelu_bf16.cu", k.source);
}

TEST(FusionCodegen, StridedOperandsMatchTheirGoldenFile) {
  // A channels_last activation plus a contiguous residual, written channels_last, then ReLU.
  Region r;
  const Shape sizes{2, 3, 4, 5};
  const int x = r.input(kFloat16, sizes, channels_last_strides(sizes));
  const int res = r.input(kFloat16, sizes);
  const Op add{.kind = OpKind::Binary, .binary = BinaryOp::Add, .args = {x, res}};
  const int sum = r.add(add, kFloat16, sizes, channels_last_strides(sizes));
  const Op relu{.kind = OpKind::Unary, .unary = UnaryOp::Relu, .args = {sum}};
  const int y = r.add(relu, kFloat16, sizes, channels_last_strides(sizes));
  r.mark_live_out(y);
  const KernelSource k = generate_kernel(r, plan_groups(r).groups.at(0));
  expect_golden("channels_last_add_relu_f16.cu", k.source);
}

TEST(FusionCodegen, AProductReadByAnAddIsKeptApartMatchingItsGoldenFile) {
  // x * w + b: eager rounds the product before the add, so the kernel must not contract them.
  Region r;
  const int x = r.input(kFloat32, {1000, 33});
  const int w = r.input(kFloat32, {33});
  const int b = r.input(kFloat32, {1000, 33});
  const int m = r.binary(BinaryOp::Mul, x, w);
  r.mark_live_out(r.unary(UnaryOp::Tanh, r.binary(BinaryOp::Add, m, b)));
  const KernelSource k = generate_kernel(r, plan_groups(r).groups.at(0));
  expect_golden("mul_add_tanh_f32.cu", k.source);
}

TEST(FusionCodegen, MasksCastsAndNonFiniteScalarsMatchTheirGoldenFile) {
  Region r;
  const int x = r.input(kFloat32, {3, 7});
  const int clamped = r.unary(UnaryOp::Clamp, x, {.a = -1, .b = std::numeric_limits<double>::infinity()});
  const int mask = r.unary(UnaryOp::LtScalar, clamped, {.a = 0.25});
  const int zero = r.input(kFloat32, {});
  const int y = r.where(mask, zero, clamped);
  const int as_bool = r.cast(y, kBool);
  const int both = r.binary(BinaryOp::Mul, as_bool, mask);  // bool * bool: and
  const int out = r.cast(both, kBFloat16);
  r.mark_live_out(out);
  const KernelSource k = generate_kernel(r, plan_groups(r).groups.at(0));
  expect_golden("mask_cast_f32.cu", k.source);
}

TEST(FusionCodegen, ARowReductionMatchesItsGoldenFile) {
  RmsNorm m({2, 2, 9000});
  const Plan plan = plan_groups(m.r);
  const KernelSource k = generate_kernel(m.r, plan.groups.at(0));
  EXPECT_EQ(k.kind, KernelKind::ReduceRows);
  EXPECT_FALSE(k.one_pass);
  EXPECT_EQ(k.operands, list({m.ms, m.x}));
  EXPECT_EQ(k.vector, 4);  // float32 squares: four per 16 bytes, as the eager kernel loads them
  expect_golden("rms_mean_rows_bf16.cu", k.source);
}

TEST(FusionCodegen, ANormInOnePassMatchesItsGoldenFile) {
  RmsNorm m;
  const Plan plan = plan_groups(m.r);
  const KernelSource k = generate_kernel(m.r, plan.groups.at(0));
  EXPECT_EQ(k.kind, KernelKind::ReduceRows);
  EXPECT_TRUE(k.one_pass);
  EXPECT_EQ(k.operands, list({m.rstd, m.y, m.x, m.w}));
  expect_golden("rms_one_pass_bf16.cu", k.source);
}

TEST(FusionCodegen, AColumnReductionWithABroadcastOperandMatchesItsGoldenFile) {
  // sum over (0, 1) of g * w * xhat in bfloat16, w broadcast along the rows.
  Region r;
  const int g = r.input(kBFloat16, {8, 16, 32});
  const int w = r.input(kBFloat16, {32});
  const int xhat = r.input(kBFloat16, {8, 16, 32});
  const int gw = r.binary(BinaryOp::Mul, g, w);
  const int prod = r.binary(BinaryOp::Mul, gw, xhat);
  r.mark_live_out(gw);
  r.mark_live_out(r.reduce(prod, {0, 1}, /*keepdim=*/true, /*mean=*/false));
  const KernelSource k = generate_kernel(r, plan_groups(r).groups.at(0));
  EXPECT_EQ(k.kind, KernelKind::ReduceColumns);
  EXPECT_EQ(k.vector, 8);
  expect_golden("weight_grad_columns_bf16.cu", k.source);
}

TEST(FusionCodegen, TwoPaddedSlicesSummedAreOneKernelStoringEachHalfMatchingItsGoldenFile) {
  // What the recorder builds for the sum of two slices' gradients (Note [Padded slices]): each
  // gradient is a piece copied into its half of a [3, 8] tensor with zeros in the other half, and
  // the sum is summed half by half. The slots carry the whole tensor's strides.
  Region r;
  const Shape half{3, 4}, strides{8, 1};
  const int x = r.input(kBFloat16, half);
  const int ga = r.unary(UnaryOp::MulScalar, x, {.a = 2});
  const int gb = r.unary(UnaryOp::Neg, x);
  const Op copy_a{.kind = OpKind::Cast, .args = {ga}};
  const Op copy_b{.kind = OpKind::Cast, .args = {gb}};
  const Op zeros{.kind = OpKind::Fill, .params = {.a = 0}, .args = {}};
  const int a0 = r.add(copy_a, kBFloat16, half, strides);
  const int a1 = r.add(zeros, kBFloat16, half, strides);
  const int b0 = r.add(zeros, kBFloat16, half, strides);
  const int b1 = r.add(copy_b, kBFloat16, half, strides);
  const auto sum = [&](int p, int q) {
    return r.add({.kind = OpKind::Binary, .binary = BinaryOp::Add, .args = {p, q}}, kBFloat16, half, strides);
  };
  const int s0 = sum(a0, b0);
  const int s1 = sum(a1, b1);
  r.mark_live_out(s0);
  r.mark_live_out(s1);
  const Plan plan = plan_groups(r);
  ASSERT_EQ(plan.groups.size(), 1u) << dump(plan);
  EXPECT_TRUE(plan.groups[0].fused);
  EXPECT_EQ(plan.groups[0].inputs, list({x}));
  EXPECT_EQ(plan.groups[0].outputs, list({s0, s1})) << "the padded gradients are never written";
  EXPECT_NE(r.dump().find("fill(0)"), std::string::npos) << r.dump();
  expect_golden("padded_slices_sum_bf16.cu", generate_kernel(r, plan.groups[0]).source);
}

TEST(FusionCodegen, NamesFollowTheBodyAndLargeIterationsIndexIn64Bits) {
  const auto kernel_of = [](double scale, Shape sizes) {
    Region r;
    const int x = r.input(kFloat32, sizes);
    const int a = r.unary(UnaryOp::MulScalar, x, {.a = scale});
    const int y = r.unary(UnaryOp::Exp, a);
    r.mark_live_out(y);
    return generate_kernel(r, plan_groups(r).groups.at(0));
  };
  const KernelSource a = kernel_of(2, {64});
  EXPECT_EQ(a.name, kernel_of(2, {64}).name);
  EXPECT_NE(a.name, kernel_of(3, {64}).name);
  EXPECT_NE(a.name, kernel_of(2, {65}).name);
  EXPECT_NE(a.source.find(a.name), std::string::npos);

  const KernelSource big = kernel_of(2, {3, int64_t{1} << 30});
  EXPECT_FALSE(big.index32);
  EXPECT_NE(big.source.find("long long i"), std::string::npos) << big.source;
}

TEST(FusionCompile, AnEqualRegionIsPlannedAndWrittenOnce) {
  const auto region_of = [](bool keep_sum, double alpha) {
    Region r;
    const int x = r.input(kBFloat16, {4, 8});
    const int b = r.input(kBFloat16, {8});
    const int sum = r.binary(BinaryOp::Add, x, b, alpha);
    r.mark_live_out(r.unary(UnaryOp::Gelu, sum));
    if (keep_sum) r.mark_live_out(sum);
    return r;
  };
  const auto first = compile_region(region_of(true, 1.0));
  EXPECT_EQ(compile_region(region_of(true, 1.0)).get(), first.get());
  EXPECT_NE(compile_region(region_of(false, 1.0)).get(), first.get()) << "another live-out set";
  EXPECT_NE(compile_region(region_of(true, 2.0)).get(), first.get()) << "another scalar";
  ASSERT_EQ(first->kernels.size(), 1u);
  EXPECT_EQ(first->kernels[0].source, generate_kernel(region_of(true, 1.0), first->plan.groups[0]).source);

  const auto reduction_of = [](Shape dims, bool mean) {
    Region r;
    const int x = r.input(kFloat32, {4, 8, 16});
    r.mark_live_out(r.reduce(r.unary(UnaryOp::Exp, x), std::move(dims), /*keepdim=*/true, mean));
    return r;
  };
  const auto sum_1 = compile_region(reduction_of({1}, false));
  EXPECT_EQ(compile_region(reduction_of({1}, false)).get(), sum_1.get());
  EXPECT_NE(compile_region(reduction_of({1}, true)).get(), sum_1.get()) << "a mean, not a sum";
  EXPECT_NE(compile_region(reduction_of({2}, false)).get(), sum_1.get()) << "other dims";
}

TEST(FusionScope, CpuOpsRunAsTheyAreAndTheEnvironmentTurnsItOff) {
  const Tensor x = nabla::rand({16, 8});
  const Tensor want = nabla::gelu(x * 2.0 + 1.0);
  {
    FusionScope scope;
    const Tensor got = nabla::gelu(x * 2.0 + 1.0);
    scope.flush();
    EXPECT_EQ(scope.stats().recorded_ops, 0);
    EXPECT_TRUE(nabla::testing::all_close(got, want, 0.0, 0.0));
  }
  const char* saved = std::getenv("NABLA_FUSION");
  const std::string before = saved ? saved : "";
  for (const char* off : {"0", "off", "false"}) {
    ::setenv("NABLA_FUSION", off, 1);
    EXPECT_FALSE(fusion_enabled_by_environment()) << off;
    EXPECT_FALSE(FusionScope().active()) << off;
  }
  ::setenv("NABLA_FUSION", "1", 1);
  EXPECT_TRUE(fusion_enabled_by_environment());
  EXPECT_EQ(fusion_environment(), std::optional<bool>(true));
  ::setenv("NABLA_FUSION", "maybe", 1);
  EXPECT_EQ(fusion_environment(), std::nullopt);
  EXPECT_FALSE(FusionScope(false).active());
  if (saved) {
    ::setenv("NABLA_FUSION", before.c_str(), 1);
  } else {
    ::unsetenv("NABLA_FUSION");
  }
}

}  // namespace
}  // namespace nabla::ops::fusion
