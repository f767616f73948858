// The autograd engine: graph shapes, accumulation, retain_graph, no_grad, hooks, in-place
// safety, and custom gradient checks of the checker itself.
#include "test_util.h"

namespace nabla {
namespace {

using testing::all_close;
using testing::random_input;
using testing::test_seed;

TEST(Autograd, SharedSubexpressionsSumTheirGradients) {
  Tensor x = random_input({5}, test_seed(), kFloat64, true);
  Tensor y = x * x;                    // used twice below
  Tensor z = (y * 3.0 + y * y).sum();  // dz/dx = (3 + 2y) * 2x
  z.backward();
  Tensor xd = x.detach();
  Tensor expected = (3.0 + 2.0 * xd * xd) * 2.0 * xd;
  EXPECT_TRUE(all_close(x.grad(), expected, 1e-12));
}

TEST(Autograd, AProductKeepsOnlyTheOperandTheOtherGradientNeeds) {
  // a * c with c constant saves c, not a (as PyTorch): a may then change in place before the
  // backward. a / c likewise; a * b with both requiring grad keeps both, and says so.
  Tensor p = random_input({6}, test_seed(), kFloat64, true);
  const Tensor c = random_input({6}, test_seed() + 1, kFloat64);
  Tensor a = p * 2.0;
  Tensor y = a * c + a / c;
  a.add_(1.0);
  y.sum().backward();
  EXPECT_TRUE(all_close(p.grad(), 2.0 * (c + 1.0 / c), 1e-12));

  Tensor q = random_input({6}, test_seed() + 2, kFloat64, true);
  Tensor b = q * 3.0;
  Tensor z = b * p;
  b.add_(1.0);
  try {
    z.sum().backward();
    FAIL() << "a saved operand changed in place and the backward ran";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("MulBackward"), std::string::npos) << e.what();
  }
}

TEST(Autograd, LeafGradientsAccumulateAcrossBackwardCalls) {
  Tensor x = random_input({3}, test_seed(), kFloat64, true);
  (x * 2.0).sum().backward();
  (x * 5.0).sum().backward();
  EXPECT_TRUE(all_close(x.grad(), full({3}, 7.0, {.dtype = kFloat64})));
  x.set_grad(Tensor());
  (x * 1.0).sum().backward();
  EXPECT_TRUE(all_close(x.grad(), ones({3}, {.dtype = kFloat64})));
}

TEST(Autograd, NewGradientsTakeTheLeafsLayoutAndDtype) {
  // Note [Gradient layout]: a weight used transposed gets a gradient laid out as the weight, not
  // as the transposed view the matmul produced; a lower-precision gradient arrives converted.
  Tensor w = random_input({6, 4}, test_seed(), kFloat64, true);  // (in, out), as GPT-2's Conv1D
  const Tensor x = random_input({3, 6}, test_seed() + 1, kFloat64);
  linear(x, w.t()).sum().backward();
  EXPECT_EQ(w.grad().strides(), w.strides());
  EXPECT_TRUE(all_close(w.grad(), matmul(x.t(), ones({3, 4}, {.dtype = kFloat64})), 1e-12));
  // linear itself returns a column-major weight's gradient column-major.
  Tensor w2 = random_input({6, 4}, test_seed() + 4, kFloat64, true);
  Tensor view = w2.t();
  view.retain_grad();
  linear(x, view).sum().backward();
  EXPECT_EQ(view.grad().strides(), view.strides());
  EXPECT_TRUE(all_close(view.grad(), matmul(ones({4, 3}, {.dtype = kFloat64}), x), 1e-12));
  // A leaf that is itself a transposed layout keeps its own strides.
  Tensor wt = random_input({4, 6}, test_seed() + 2, kFloat64).t().detach().requires_grad_();
  (wt * 2.0).sum().backward();
  EXPECT_EQ(wt.grad().strides(), wt.strides());
  EXPECT_TRUE(all_close(wt.grad(), full({6, 4}, 2.0, {.dtype = kFloat64})));
  // A float32 leaf reached by a float64 gradient stores float32.
  Tensor f = random_input({5}, test_seed() + 3, kFloat32, true);
  (f.to(kFloat64) * 3.0).sum().backward();
  EXPECT_EQ(f.grad().dtype(), kFloat32);
  EXPECT_TRUE(all_close(f.grad(), full({5}, 3.0)));
}

TEST(Autograd, RetainGraphAllowsASecondBackwardAndItsAbsenceExplains) {
  Tensor x = random_input({4}, test_seed(), kFloat64, true);
  Tensor loss = (exp(x) * x).sum();
  loss.backward({}, /*retain_graph=*/true);
  Tensor first = x.grad().clone();
  loss.backward();
  EXPECT_TRUE(all_close(x.grad(), first * 2.0, 1e-12));
  EXPECT_NABLA_ERROR(loss.backward(), "second time", "retain_graph=true");
}

TEST(Autograd, NoGradGuardRecordsNothing) {
  Tensor x = random_input({3}, test_seed(), kFloat64, true);
  Tensor y;
  {
    NoGradGuard no_grad;
    y = x * 2.0;
    EXPECT_FALSE(GradMode::is_enabled());
  }
  EXPECT_TRUE(GradMode::is_enabled());
  EXPECT_FALSE(y.requires_grad());
  EXPECT_EQ(y.grad_fn(), nullptr);
  EXPECT_NABLA_ERROR(y.sum().backward(), "does not require grad");
  Tensor d = (x * 2.0).detach();
  EXPECT_FALSE(d.requires_grad());
}

TEST(Autograd, ModifyingASavedTensorInPlaceIsAnErrorNotAWrongGradient) {
  Tensor x = random_input({4}, test_seed(), kFloat64, true);
  Tensor h = x * 1.0;
  Tensor y = h * h;  // saves h
  h.add_(1.0);       // changes what mul saved
  EXPECT_NABLA_ERROR(y.sum().backward(), "MulBackward", "modified by an in-place operation", "version");
  Tensor e = exp(x * 1.0);  // saves its output
  Tensor loss = e.sum();
  e.mul_(2.0);
  EXPECT_NABLA_ERROR(loss.backward(), "ExpBackward", "modified by an in-place operation");
}

TEST(Autograd, InPlaceOnLeavesAndViewsIsRefusedWithAReason) {
  Tensor x = random_input({2, 3}, test_seed(), kFloat64, true);
  EXPECT_NABLA_ERROR(x.add_(1.0), "add_", "leaf tensor that requires grad", "NoGradGuard");
  Tensor h = x * 1.0;
  Tensor row = h.select(0, 0);
  EXPECT_NABLA_ERROR(row.mul_(2.0), "mul_", "view of a tensor that requires grad");
  {
    NoGradGuard no_grad;  // optimizer-style updates are fine
    x.add_(1.0);
  }
}

TEST(Autograd, HooksSeeAndCanReplaceGradients) {
  Tensor x = random_input({3}, test_seed(), kFloat64, true);
  Tensor seen;
  int post_calls = 0;
  x.register_hook([&](const Tensor& g) {
    seen = g.clone();
    return g * 10.0;  // replaces the gradient
  });
  x.register_post_accumulate_grad_hook([&](const Tensor& leaf) {
    ++post_calls;
    EXPECT_TRUE(leaf.grad().defined());  // final when the hook runs
  });
  Tensor h = x * 2.0;
  Tensor h_seen;
  h.register_hook([&](const Tensor& g) {
    h_seen = g.clone();
    return Tensor();  // keep it
  });
  (h * 3.0).sum().backward();
  EXPECT_TRUE(all_close(h_seen, full({3}, 3.0, {.dtype = kFloat64})));
  EXPECT_TRUE(all_close(seen, full({3}, 6.0, {.dtype = kFloat64})));
  EXPECT_TRUE(all_close(x.grad(), full({3}, 60.0, {.dtype = kFloat64})));
  EXPECT_EQ(post_calls, 1);
}

TEST(Autograd, PostAccumulateHookFiresOnceWithTheFullGradientOfALeafUsedTwice) {
  Tensor w = random_input({4}, test_seed(), kFloat64, true);
  std::vector<double> at_hook;
  w.register_post_accumulate_grad_hook(
      [&](const Tensor& leaf) { at_hook = leaf.grad().to_vector<double>(); });
  ((w * 2.0).sum() + (w * 3.0).sum()).backward();
  ASSERT_EQ(at_hook.size(), 4u);
  for (double g : at_hook) EXPECT_DOUBLE_EQ(g, 5.0);
}

TEST(Autograd, RetainGradKeepsNonLeafGradients) {
  Tensor x = random_input({3}, test_seed(), kFloat64, true);
  Tensor h = x * 4.0;
  h.retain_grad();
  (h * h).sum().backward();
  EXPECT_TRUE(all_close(h.grad(), h.detach() * 2.0, 1e-12));
}

TEST(Autograd, CreateGraphGivesSecondDerivatives) {
  Tensor x = random_input({3}, test_seed(), kFloat64, true);
  Tensor y = (x * x * x).sum();
  autograd::backward({y}, {}, {.create_graph = true});
  Tensor g = x.grad();  // 3x^2, with history
  ASSERT_TRUE(g.requires_grad());
  x.set_grad(Tensor());
  g.sum().backward();
  EXPECT_TRUE(all_close(x.grad(), x.detach() * 6.0, 1e-12));
}

// Hessian-vector product through create_graph against a central difference of the gradient.
::testing::AssertionResult hessian_vector_matches(const std::function<Tensor(const Tensor&)>& f,
                                                  const Tensor& x0, uint64_t seed) {
  Tensor u = random_input(x0.sizes(), seed, kFloat64);
  auto gradient_at = [&](const Tensor& at, bool create_graph) {
    Tensor x = at.detach().clone().requires_grad_();
    autograd::backward({f(x).sum()}, {}, {.create_graph = create_graph});
    return std::make_pair(x, x.grad());
  };
  auto [x, g] = gradient_at(x0, true);
  x.set_grad(Tensor());
  (g * u).sum().backward();  // H u
  const double eps = 1e-6;
  Tensor numeric =
      (gradient_at(x0 + u * eps, false).second - gradient_at(x0 - u * eps, false).second) / (2 * eps);
  return all_close(x.grad(), numeric, 1e-5, 1e-6);
}

TEST(Autograd, SecondDerivativesFlowThroughSavedOutputs) {
  uint64_t seed = test_seed();
  Tensor x = random_input({3, 5}, seed, kFloat64);
  Tensor w = random_input({3, 5}, seed + 1, kFloat64);
  EXPECT_TRUE(hessian_vector_matches([&](const Tensor& t) { return log_softmax(t, 1) * w; }, x, seed + 2));
  EXPECT_TRUE(hessian_vector_matches([&](const Tensor& t) { return softmax(t, 0) * w; }, x, seed + 3));
  EXPECT_TRUE(hessian_vector_matches([&](const Tensor& t) { return tanh(t) * sigmoid(t) * w; }, x, seed + 4));
  EXPECT_TRUE(hessian_vector_matches([&](const Tensor& t) { return exp(t * 0.5) * t; }, x, seed + 5));
}

TEST(Autograd, BackwardNeedsAGradientForNonScalarOutputs) {
  Tensor x = random_input({3}, test_seed(), kFloat64, true);
  Tensor y = x * 2.0;
  EXPECT_NABLA_ERROR(y.backward(), "one-element outputs", "[3]");
  y.backward(full({3}, 0.5, {.dtype = kFloat64}));
  EXPECT_TRUE(all_close(x.grad(), ones({3}, {.dtype = kFloat64})));
}

TEST(Autograd, GradcheckCatchesAWrongGradient) {
  // A deliberately wrong backward (gradient of x^2 reported as x) must fail the check, so
  // passing checks elsewhere mean something.
  Tensor x = random_input({4}, test_seed(), kFloat64, true);
  auto wrong_square = [](const TensorList& in) {
    Tensor out = in[0].detach() * in[0].detach();
    autograd::record("WrongSquare", {in[0]}, {out}, {in[0]},
                     [](autograd::BackwardContext& c) { return TensorList{c.grad() * c.saved[0]}; });
    return out;
  };
  auto r = gradcheck(wrong_square, {x});
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.message.find("analytical"), std::string::npos);
}

// A node may take the gradient other nodes already sent to its input and return the total
// (take_pending_gradient): the engine then stores that total instead of adding. Leaves and
// create_graph get nothing to take.
TEST(Autograd, TakePendingGradientHandsOverTheSumSoFar) {
  const Tensor x0 = random_input({5}, test_seed(), kFloat64, true);
  for (const bool create_graph : {false, true}) {
    x0.set_grad(Tensor());
    const Tensor x = x0 * 2.0;  // not a leaf: its gradients meet in the engine's buffer
    bool took = false;
    Tensor a = x.detach() * 3.0;
    autograd::record("TakesPending", {x}, {a}, {}, [&took](autograd::BackwardContext& c) {
      const Tensor pending = autograd::take_pending_gradient(0);
      took = pending.defined();
      return TensorList{took ? c.grad() * 3.0 + pending : c.grad() * 3.0};
    });
    const Tensor b = x * x;  // recorded after `a`: its node runs first, so its gradient is pending
    autograd::backward({a.sum() + b.sum()}, {}, {.create_graph = create_graph});
    EXPECT_EQ(took, !create_graph);
    EXPECT_TRUE(all_close(x0.grad(), (x.detach() * 2.0 + 3.0) * 2.0, 1e-12, 1e-12)) << create_graph;
  }
  EXPECT_FALSE(autograd::take_pending_gradient(0).defined());  // outside a backward pass
}

// Note [Pointwise nodes first]: of two ready nodes, a pointwise op's runs before a newer matmul's
// (whose backward would flush a compiled step's held ops), and the gradients are the same.
TEST(Autograd, ReadyPointwiseNodesRunBeforeNewerOtherNodes) {
  Tensor x = random_input({4, 3}, test_seed(), kFloat64, true);
  const Tensor w = random_input({5, 3}, test_seed() + 1, kFloat64);
  Tensor p = x * 3.0;       // pointwise, older
  Tensor m = linear(x, w);  // newer, not pointwise
  std::vector<std::string> order;
  p.register_hook([&](const Tensor&) {
    order.push_back("mul");
    return Tensor();
  });
  m.register_hook([&](const Tensor&) {
    order.push_back("linear");
    return Tensor();
  });
  (p.sum() + m.sum()).backward();
  EXPECT_EQ(order, (std::vector<std::string>{"mul", "linear"}));
  // d/dx = 3 + the column sums of w, in every row.
  const Tensor expected = (w.sum({0}) + 3.0).unsqueeze(0).expand({4, 3});
  EXPECT_TRUE(all_close(x.grad(), expected, 1e-12));
}

// Note [Gradients in their input's layout]: the gradient a slice's backward makes is laid out as
// the sliced tensor (here a transposed view), and a pointwise op of inputs sharing one dense
// layout gives that layout; so the sum of two halves' gradients goes back through the transpose
// and a reshape as views. The values are the usual ones.
TEST(Autograd, SliceGradientsAndPointwiseResultsKeepTheirInputsDenseLayout) {
  Tensor base = random_input({2, 5, 3, 4}, test_seed(), kFloat64, true);  // (b, t, h, d)
  Tensor x = base * 1.0;                                                  // not a leaf
  Tensor heads = x.transpose(1, 2);                                       // (b, h, t, d) view
  Tensor seen;
  heads.register_hook([&](const Tensor& g) {
    seen = g;
    return Tensor();
  });
  const Tensor c = random_input({2, 3, 5, 2}, test_seed() + 1, kFloat64);
  Tensor a = heads.narrow(-1, 0, 2), b = heads.narrow(-1, 2, 2);
  ((a * c).sum() + (b * c * 2.0).sum()).backward();
  ASSERT_TRUE(seen.defined());
  EXPECT_EQ(seen.strides(), heads.strides()) << "the summed slice gradients keep the view's layout";
  EXPECT_TRUE(seen.transpose(1, 2).is_contiguous());
  const Tensor expected = cat({c, c * 2.0}, -1).transpose(1, 2);
  EXPECT_TRUE(all_close(base.grad(), expected, 1e-12));

  // Pointwise results: one shared dense layout is kept; mixed layouts give contiguous results.
  const Tensor t1 = random_input({4, 6}, test_seed() + 2, kFloat64).t(),
               t2 = random_input({4, 6}, test_seed() + 3, kFloat64).t();
  const Tensor same = t1 + t2;
  EXPECT_EQ(same.strides(), t1.strides());
  EXPECT_TRUE(all_close(same, t1.contiguous() + t2.contiguous(), 0));
  const Tensor mixed = t1 + t2.contiguous();
  EXPECT_TRUE(mixed.is_contiguous());
  EXPECT_TRUE(all_close(mixed, t1.contiguous() + t2.contiguous(), 0));
  EXPECT_EQ(exp(t1).strides(), t1.strides());
}

TEST(Autograd, RequiresGradOnlyOnFloatingLeaves) {
  Tensor i = arange(3, {.dtype = kInt64});
  EXPECT_NABLA_ERROR(i.requires_grad_(), "only floating-point tensors can require gradients");
  Tensor x = random_input({2}, test_seed(), kFloat64, true);
  Tensor y = x * 2.0;
  EXPECT_NABLA_ERROR(y.requires_grad_(false), "leaf tensor", "MulScalarBackward");
}

}  // namespace
}  // namespace nabla
