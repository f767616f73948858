// Losses on the CPU: cross_entropy, nll_loss, mse_loss and binary_cross_entropy_with_logits
// against closed forms computed in the test (logsumexp, sigmoid, squares), for each reduction,
// with label smoothing, ignore_index, spatial dims and pos_weight; float64 gradcheck of each,
// the gradient at a zero logit, reduced precision and the error messages.
#include <cmath>
#include <limits>
#include <memory>

#include "test_util.h"

namespace nabla {
namespace {

using namespace testing;  // NOLINT: test helpers

// Per-position -log_softmax(x)[target], with label smoothing eps: (1 - eps) * (lse - x_t) +
// eps * (lse - mean_c x_c); 0 where target == ignore. x (N, C, S...) row-major, target (N, S...).
std::vector<double> reference_cross_entropy(const Tensor& logits, const Tensor& target, double eps,
                                            int64_t ignore) {
  const int64_t n = logits.size(0), c = logits.size(1), s = logits.numel() / (n * c);
  const std::vector<double> x = logits.to(kFloat64).contiguous().to_vector<double>();
  const std::vector<int64_t> t = target.contiguous().to_vector<int64_t>();
  std::vector<double> out;
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t p = 0; p < s; ++p) {
      const int64_t label = t[i * s + p];
      if (label == ignore) {
        out.push_back(0.0);
        continue;
      }
      double m = -std::numeric_limits<double>::infinity(), total = 0, mean = 0;
      for (int64_t k = 0; k < c; ++k) m = std::max(m, x[(i * c + k) * s + p]);
      for (int64_t k = 0; k < c; ++k)
        total += std::exp(x[(i * c + k) * s + p] - m), mean += x[(i * c + k) * s + p] / c;
      const double lse = m + std::log(total);
      out.push_back((1 - eps) * (lse - x[(i * c + label) * s + p]) + eps * (lse - mean));
    }
  }
  return out;
}

// Reduces per-position losses: sum, or the mean over the targets that are not ignored.
Tensor reduce(const std::vector<double>& per, const Tensor& target, int64_t ignore, Reduction r,
              const Shape& sizes) {
  if (r == Reduction::None) return tensor<double>(per, sizes);
  const std::vector<int64_t> t = target.contiguous().to_vector<int64_t>();
  double total = 0, count = 0;
  for (size_t i = 0; i < per.size(); ++i) total += per[i], count += t[i] != ignore ? 1 : 0;
  return tensor<double>({r == Reduction::Sum ? total : total / count}, {}).view({});
}

// Class targets in [0, c), with every fourth one set to `ignore` when asked.
Tensor random_targets(const Shape& sizes, int64_t c, uint64_t seed,
                      std::optional<int64_t> ignore = std::nullopt) {
  Generator gen(seed);
  Tensor t = randint(0, c, sizes, {.dtype = kInt64}, &gen);
  if (!ignore) return t;
  std::vector<int64_t> v = t.to_vector<int64_t>();
  for (size_t i = 0; i < v.size(); i += 4) v[i] = *ignore;
  return tensor<int64_t>(v, sizes);
}

const std::vector<Reduction> kReductions = {Reduction::None, Reduction::Mean, Reduction::Sum};

TEST(CrossEntropy, MatchesLogSumExpForEveryReductionSmoothingAndIgnoreIndex) {
  uint64_t seed = test_seed();
  struct Case {
    Shape logits;
    double eps;
    int64_t ignore;
  };
  const std::vector<Case> cases = {
      {{6, 5}, 0.0, -100}, {{6, 5}, 0.1, -100},       {{8, 4}, 0.0, 2},  // ignore a real class
      {{8, 4}, 0.25, -1},  {{2, 3, 4, 5}, 0.0, -100}, {{2, 3, 4, 5}, 0.2, 0},
  };
  for (const Case& c : cases) {
    const Tensor x = random_input(c.logits, ++seed) * 3.0;
    Shape tshape(c.logits);
    tshape.erase(tshape.begin() + 1);
    const bool add_ignored = c.ignore < 0;
    const Tensor t =
        random_targets(tshape, c.logits[1], ++seed, add_ignored ? std::optional(c.ignore) : std::nullopt);
    const std::vector<double> per = reference_cross_entropy(x, t, c.eps, c.ignore);
    for (Reduction r : kReductions) {
      const Tensor loss =
          cross_entropy(x, t, {.label_smoothing = c.eps, .ignore_index = c.ignore, .reduction = r});
      EXPECT_TRUE(all_close(loss, reduce(per, t, c.ignore, r, tshape), 1e-12, 1e-12))
          << shape_str(c.logits) << " eps " << c.eps << " ignore " << c.ignore << " reduction " << int(r);
    }
  }
}

TEST(CrossEntropy, ChannelsLastAndUnbatchedInputsGiveTheSameLoss) {
  const Tensor x = random_input({2, 5, 3, 4}, test_seed());
  const Tensor t = random_targets({2, 3, 4}, 5, test_seed() + 1);
  const Tensor want = cross_entropy(x, t, {.reduction = Reduction::None});
  EXPECT_TRUE(
      all_close(cross_entropy(x.contiguous(MemoryFormat::ChannelsLast), t, {.reduction = Reduction::None}),
                want, 1e-14, 1e-14));
  const Tensor row = random_input({7}, test_seed() + 2);
  const Tensor label = tensor<int64_t>({3}, {}).view({});
  EXPECT_TRUE(
      all_close(cross_entropy(row, label), cross_entropy(row.unsqueeze(0), label.unsqueeze(0)), 0, 0));
  EXPECT_EQ(cross_entropy(row, label, {.reduction = Reduction::None}).dim(), 0);
}

TEST(CrossEntropy, GradientsMatchFiniteDifferences) {
  uint64_t seed = test_seed();
  for (const Shape& shape : {Shape{5, 4}, Shape{2, 3, 3, 2}}) {
    const Tensor x = random_input(shape, ++seed, kFloat64, true);
    Shape tshape(shape);
    tshape.erase(tshape.begin() + 1);
    const Tensor t = random_targets(tshape, shape[1], ++seed, -100);
    for (Reduction r : kReductions) {
      for (double eps : {0.0, 0.15}) {
        GradcheckResult res = gradcheck(
            [&](const TensorList& in) {
              return cross_entropy(in[0], t, {.label_smoothing = eps, .reduction = r});
            },
            {x});
        EXPECT_TRUE(res.ok) << shape_str(shape) << " eps " << eps << " reduction " << int(r) << ": "
                            << res.message;
      }
    }
  }
}

TEST(CrossEntropy, TheGradientIsWrittenOverLogitsNobodyElseHolds) {
  // Note [Gradient over the logits]: with the logits a temporary, their gradient reuses their
  // buffer; held by the caller, or kept by retain_graph, they are left as they were. The
  // gradients are those of the log-softmax composition either way.
  const uint64_t seed = test_seed();
  const Tensor target = randint(0, 7, {5}, {.dtype = kInt64});
  const auto expected = [&](const Tensor& x) {
    Tensor xr = x.detach().requires_grad_(true);
    nll_loss(log_softmax(xr * 2.0, 1), target).backward();
    return xr.grad();
  };
  for (const bool hold : {false, true}) {
    for (const bool retain : {false, true}) {
      Tensor x = random_input({5, 7}, seed, kFloat64, true);
      Tensor logits = x * 2.0;
      const void* buffer = logits.data_ptr();
      const Tensor before = logits.detach().clone();
      const void* grad_buffer = nullptr;
      logits.register_hook([&](const Tensor& g) {
        grad_buffer = g.data_ptr();
        return Tensor();
      });
      Tensor loss = cross_entropy(logits, target);
      if (!hold) logits = Tensor();
      loss.backward({}, retain);
      EXPECT_TRUE(all_close(x.grad(), expected(x), 1e-12)) << hold << retain;
      EXPECT_EQ(grad_buffer == buffer, !hold && !retain) << "held " << hold << ", retain_graph " << retain;
      if (hold) {
        EXPECT_TRUE(all_close(logits, before, 0.0, 0.0));
      }
    }
  }
}

TEST(CrossEntropy, IgnoredTargetsGetNoGradientAndAllIgnoredMeanIsNaN) {
  const Tensor x = random_input({4, 3}, test_seed(), kFloat64, true);
  const Tensor t = tensor<int64_t>({1, -100, 2, -100}, {4});
  cross_entropy(x, t, {.label_smoothing = 0.1}).backward();
  const std::vector<double> g = x.grad().to_vector<double>();
  for (int k = 0; k < 3; ++k) {
    EXPECT_EQ(g[3 + k], 0.0);
    EXPECT_EQ(g[9 + k], 0.0);
  }
  EXPECT_NE(g[0], 0.0);
  const Tensor all_ignored = full({4}, -100, {.dtype = kInt64});
  EXPECT_TRUE(std::isnan(cross_entropy(x.detach(), all_ignored).item<double>()));
  EXPECT_EQ(cross_entropy(x.detach(), all_ignored, {.reduction = Reduction::Sum}).item<double>(), 0.0);
}

TEST(CrossEntropy, Float16LossOverManyTargetsIsReducedInFloat32) {
  // 70000 targets: a float16 count (or sum) would overflow to inf.
  const Tensor x = random_input({70000, 3}, test_seed());
  const Tensor t = random_targets({70000}, 3, test_seed() + 1);
  const Tensor loss = cross_entropy(x.to(kFloat16), t);
  EXPECT_EQ(loss.dtype(), kFloat16);
  EXPECT_TRUE(all_close(loss, cross_entropy(x, t), 2e-3, 2e-3));
  EXPECT_TRUE(all_close(cross_entropy(x.to(kBFloat16), t, {.label_smoothing = 0.1}),
                        cross_entropy(x, t, {.label_smoothing = 0.1}), 2e-2, 2e-2));
}

TEST(CrossEntropy, FusedRowsHaveSecondDerivatives) {
  // (N, C) logits run the fused kernels; create_graph differentiates their gradient formula.
  uint64_t seed = test_seed();
  const Tensor t = random_targets({6}, 5, ++seed, 2);
  for (double smoothing : {0.0, 0.2}) {
    const Tensor go = random_input({6}, ++seed, kFloat64);
    GradcheckResult res = gradcheck(
        [&](const TensorList& in) {
          EnableGradGuard enable;
          // gradcheck also evaluates fn on perturbed inputs that need no grad; a fresh leaf then.
          const Tensor y = in[0].requires_grad() ? in[0] * 1.0 : in[0].detach().clone().requires_grad_(true);
          // y's gradient, with its history (create_graph). The hook outlives this call (gradcheck's
          // own backward passes y again), so it writes into shared storage, once.
          auto g = std::make_shared<Tensor>();
          y.register_hook([g](const Tensor& grad) {
            if (!g->defined()) *g = grad;
            return Tensor();
          });
          const Tensor per = cross_entropy(
              y, t, {.label_smoothing = smoothing, .ignore_index = 2, .reduction = Reduction::None});
          autograd::backward({per}, {go}, {.create_graph = true});
          if (in[0].requires_grad())
            in[0].set_grad(Tensor());  // this inner backward's leaf gradient is not gradcheck's
          return *g * *g;              // a function of the gradient, so its derivative is the second one
        },
        {random_input({6, 5}, ++seed, kFloat64, true)});
    EXPECT_TRUE(res.ok) << smoothing << ": " << res.message;
  }
}

TEST(CrossEntropy, AMinusInfinityLogitIsAClassThatCannotBeChosen) {
  // A masked class (-inf logit) away from the target: a finite loss without smoothing, and with
  // smoothing +inf (its log-probability is -inf), as PyTorch gives.
  const Tensor x = tensor<double>({0.5, -INFINITY, 1.0, 2.0, 0.25, -1.0}, {2, 3});
  const Tensor t = tensor<int64_t>({0, 2});
  const auto per = cross_entropy(x, t, {.reduction = Reduction::None}).to_vector<double>();
  EXPECT_NEAR(per[0], std::log(std::exp(0.5) + std::exp(1.0)) - 0.5, 1e-12);
  EXPECT_NEAR(per[1], std::log(std::exp(2.0) + std::exp(0.25) + std::exp(-1.0)) + 1.0, 1e-12);
  const Tensor xg = x.detach().requires_grad_(true);
  cross_entropy(xg, t).backward();
  const auto g = xg.grad().to_vector<double>();
  EXPECT_EQ(g[1], 0.0);  // no gradient reaches the masked class
  for (double v : g) EXPECT_TRUE(std::isfinite(v));
  EXPECT_TRUE(std::isinf(cross_entropy(x, t, {.label_smoothing = 0.1}).item<double>()));
}

TEST(CrossEntropy, Bfloat16LogitsUnderAutocastGiveTheFloat32Loss) {
  // The fused path reads bfloat16 logits as they are: the loss is the float32 loss of the same
  // (rounded) values, in float32, as autocast's float32 policy asks.
  uint64_t seed = test_seed();
  const Tensor x = random_input({7, 300}, ++seed, kFloat32).to(kBFloat16);
  const Tensor t = random_targets({7}, 300, ++seed, -100);
  Tensor loss;
  {
    amp::Autocast autocast(Device::cpu(), kBFloat16);
    loss = cross_entropy(x, t, {.label_smoothing = 0.1});
  }
  EXPECT_EQ(loss.dtype(), kFloat32);
  EXPECT_TRUE(all_close(loss, cross_entropy(x.to(kFloat32), t, {.label_smoothing = 0.1}), 1e-6, 1e-6));
  EXPECT_EQ(cross_entropy(x, t).dtype(), kBFloat16);  // without autocast: the logits' dtype
}

TEST(NllLoss, PicksMinusLogProbabilityAndMatchesCrossEntropy) {
  uint64_t seed = test_seed();
  const Tensor x = random_input({2, 4, 3}, ++seed);
  const Tensor t = random_targets({2, 3}, 4, ++seed, 1);
  const Tensor logp = log_softmax(x, 1);
  std::vector<double> lp = logp.to_vector<double>(), per;
  const std::vector<int64_t> tv = t.to_vector<int64_t>();
  for (int64_t n = 0; n < 2; ++n)
    for (int64_t s = 0; s < 3; ++s) {
      const int64_t label = tv[n * 3 + s];
      per.push_back(label == 1 ? 0.0 : -lp[(n * 4 + label) * 3 + s]);
    }
  for (Reduction r : kReductions) {
    EXPECT_TRUE(all_close(nll_loss(logp, t, {.ignore_index = 1, .reduction = r}),
                          reduce(per, t, 1, r, {2, 3}), 1e-14, 1e-14));
    EXPECT_TRUE(all_close(nll_loss(logp, t, {.ignore_index = 1, .reduction = r}),
                          cross_entropy(x, t, {.ignore_index = 1, .reduction = r}), 1e-14, 1e-14));
  }
}

TEST(NllLoss, GradientAndDoubleBackwardMatchFiniteDifferences) {
  uint64_t seed = test_seed();
  const Tensor logp = random_input({5, 4, 2}, ++seed, kFloat64, true);
  const Tensor t = random_targets({5, 2}, 4, ++seed, -100);
  for (Reduction r : kReductions) {
    GradcheckResult res =
        gradcheck([&](const TensorList& in) { return nll_loss(in[0], t, {.reduction = r}); }, {logp});
    EXPECT_TRUE(res.ok) << int(r) << ": " << res.message;
  }
  // The gradient as a function of the incoming gradient (the backward's own derivative).
  const Tensor go = random_input({5, 2}, ++seed, kFloat64, true);
  GradcheckResult res = gradcheck(
      [&](const TensorList& in) {
        EnableGradGuard enable;
        Tensor leaf = logp.detach().clone().requires_grad_(true);
        autograd::backward({nll_loss(leaf, t, {.reduction = Reduction::None})}, {in[0]},
                           {.create_graph = true});
        return leaf.grad();
      },
      {go});
  EXPECT_TRUE(res.ok) << res.message;
}

TEST(MseLoss, MatchesSquaredDifferenceForEveryReduction) {
  uint64_t seed = test_seed();
  const Tensor a = random_input({3, 4, 2}, ++seed), b = random_input({3, 4, 2}, ++seed);
  const std::vector<double> av = a.to_vector<double>(), bv = b.to_vector<double>();
  std::vector<double> per;
  double total = 0;
  for (size_t i = 0; i < av.size(); ++i)
    per.push_back((av[i] - bv[i]) * (av[i] - bv[i])), total += per.back();
  EXPECT_TRUE(
      all_close(mse_loss(a, b, {.reduction = Reduction::None}), tensor<double>(per, {3, 4, 2}), 1e-15, 0));
  EXPECT_TRUE(all_close(mse_loss(a, b), tensor<double>({total / 24}, {}).view({}), 1e-14, 0));
  EXPECT_TRUE(all_close(mse_loss(a, b, {.reduction = Reduction::Sum}), tensor<double>({total}, {}).view({}),
                        1e-14, 0));
  for (Reduction r : kReductions) {
    GradcheckResult res =
        gradcheck([&](const TensorList& in) { return mse_loss(in[0], in[1], {.reduction = r}); },
                  {a.detach().requires_grad_(true), b.detach().requires_grad_(true)});
    EXPECT_TRUE(res.ok) << int(r) << ": " << res.message;
  }
}

// -(w t log sigmoid(x) + (1 - t) log(1 - sigmoid(x))), directly.
std::vector<double> reference_bce(const Tensor& x, const Tensor& t, const Tensor& w) {
  const std::vector<double> xv = x.to_vector<double>(), tv = t.to_vector<double>();
  const std::vector<double> wv = w.defined() ? w.expand(x.sizes()).contiguous().to_vector<double>()
                                             : std::vector<double>(xv.size(), 1.0);
  std::vector<double> out;
  for (size_t i = 0; i < xv.size(); ++i) {
    const double s = 1.0 / (1.0 + std::exp(-xv[i]));
    out.push_back(-(wv[i] * tv[i] * std::log(s) + (1 - tv[i]) * std::log(1 - s)));
  }
  return out;
}

TEST(BinaryCrossEntropyWithLogits, MatchesTheDefinitionWithAndWithoutPosWeight) {
  uint64_t seed = test_seed();
  const Tensor x = random_input({4, 3}, ++seed) * 2.0;
  const Tensor t = rand({4, 3}, {.dtype = kFloat64});  // soft targets in [0, 1)
  const Tensor w = abs(random_input({3}, ++seed)) * 2.0;
  for (const Tensor& pw : {Tensor(), w}) {
    const std::vector<double> per = reference_bce(x, t, pw);
    double total = 0;
    for (double v : per) total += v;
    auto loss = [&](Reduction r) {
      return binary_cross_entropy_with_logits(x, t, {.pos_weight = pw, .reduction = r});
    };
    EXPECT_TRUE(all_close(loss(Reduction::None), tensor<double>(per, {4, 3}), 1e-12, 1e-14));
    EXPECT_TRUE(all_close(loss(Reduction::Mean), tensor<double>({total / 12}, {}).view({}), 1e-12, 0));
    EXPECT_TRUE(all_close(loss(Reduction::Sum), tensor<double>({total}, {}).view({}), 1e-12, 0));
  }
}

TEST(BinaryCrossEntropyWithLogits, GradientsMatchFiniteDifferencesForLogitsTargetsAndPosWeight) {
  uint64_t seed = test_seed();
  const Tensor x = random_input({3, 4}, ++seed, kFloat64, true);
  const Tensor t = rand({3, 4}, {.dtype = kFloat64}).requires_grad_(true);
  const Tensor w = (abs(random_input({4}, ++seed)) + 0.5).requires_grad_(true);
  for (Reduction r : kReductions) {
    GradcheckResult plain = gradcheck(
        [&](const TensorList& in) {
          return binary_cross_entropy_with_logits(in[0], in[1], {.reduction = r});
        },
        {x, t});
    EXPECT_TRUE(plain.ok) << int(r) << ": " << plain.message;
    GradcheckResult weighted = gradcheck(
        [&](const TensorList& in) {
          return binary_cross_entropy_with_logits(in[0], in[1], {.pos_weight = in[2], .reduction = r});
        },
        {x, t, w});
    EXPECT_TRUE(weighted.ok) << int(r) << ": " << weighted.message;
  }
}

TEST(BinaryCrossEntropyWithLogits, ZeroLogitHasGradientHalfMinusTargetAndLargeLogitsStayFinite) {
  Tensor x = tensor<double>({0.0, 0.0, 100.0, -100.0}, {4}).requires_grad_(true);
  const Tensor t = tensor<double>({1.0, 0.25, 0.0, 1.0}, {4});
  Tensor loss = binary_cross_entropy_with_logits(x, t, {.reduction = Reduction::None});
  EXPECT_TRUE(
      all_close(loss, tensor<double>({std::log(2.0), std::log(2.0), 100.0, 100.0}, {4}), 1e-12, 1e-12));
  loss.sum().backward();
  EXPECT_TRUE(all_close(x.grad(), tensor<double>({-0.5, 0.25, 1.0, -1.0}, {4}), 1e-12, 1e-12));
}

TEST(Loss, BadArgumentsGiveClearErrors) {
  const Tensor x = random_input({4, 3}, test_seed());
  const Tensor t = tensor<int64_t>({0, 1, 2, 1}, {4});
  EXPECT_NABLA_ERROR(cross_entropy(x, tensor<int64_t>({0, 1, 2}, {3})), "cross_entropy", "[4]", "[3]");
  EXPECT_NABLA_ERROR(cross_entropy(x, t.to(kFloat32)), "cross_entropy", "int64 target", "float32");
  EXPECT_NABLA_ERROR(cross_entropy(x, tensor<int64_t>({0, 1, 3, 1}, {4})), "cross_entropy", "target 3",
                     "3 classes");
  EXPECT_NABLA_ERROR(cross_entropy(x, t, {.label_smoothing = 1.5}), "cross_entropy", "label_smoothing",
                     "1.5");
  EXPECT_NABLA_ERROR(nll_loss(x, tensor<int64_t>({0, -2, 1, 1}, {4})), "nll_loss", "target -2");
  EXPECT_NABLA_ERROR(nll_loss(x.to(kInt64), t), "nll_loss", "floating-point");
  EXPECT_NABLA_ERROR(mse_loss(x, x.view({3, 4})), "mse_loss", "one shape", "[4, 3]", "[3, 4]");
  EXPECT_NABLA_ERROR(binary_cross_entropy_with_logits(x, x.view({12})), "binary_cross_entropy_with_logits",
                     "one shape");
  EXPECT_NABLA_ERROR(binary_cross_entropy_with_logits(x, x, {.pos_weight = ones({4}, {.dtype = kFloat64})}),
                     "binary_cross_entropy_with_logits");
  EXPECT_NABLA_ERROR(
      binary_cross_entropy_with_logits(x, x, {.pos_weight = ones({2, 4, 3}, {.dtype = kFloat64})}),
      "pos_weight", "must broadcast");
}

}  // namespace
}  // namespace nabla
