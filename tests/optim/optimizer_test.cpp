// Optimizer updates against hand-written references: plain loops over to_vector<double>()
// of the same gradients, written from PyTorch's (and the MLPerf LARS) update rules.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "test_util.h"

namespace nabla::testing {
namespace {

using optim::ParamGroup;

// Fresh parameters and, per step, fresh gradients (all float64, non-zero).
struct Problem {
  TensorList params;
  std::vector<TensorList> grads;  // [step][param]
};

Problem make_problem(uint64_t seed, int steps, std::vector<Shape> shapes = {{3, 4}, {5}}) {
  Problem p;
  for (size_t i = 0; i < shapes.size(); ++i)
    p.params.push_back(random_input(shapes[i], seed + i, kFloat64, true));
  for (int s = 0; s < steps; ++s) {
    TensorList g;
    for (size_t i = 0; i < shapes.size(); ++i)
      g.push_back(random_input(shapes[i], seed + 1000 * (s + 1) + i));
    p.grads.push_back(g);
  }
  return p;
}

std::vector<std::vector<double>> values(const TensorList& ts) {
  std::vector<std::vector<double>> out;
  for (const auto& t : ts) out.push_back(t.detach().to_vector<double>());
  return out;
}

void set_grads(const TensorList& params, const TensorList& grads) {
  for (size_t i = 0; i < params.size(); ++i) params[i].set_grad(grads[i].clone());
}

void expect_params(const TensorList& params, const std::vector<std::vector<double>>& ref,
                   double rtol = 1e-12) {
  for (size_t i = 0; i < params.size(); ++i) {
    EXPECT_TRUE(all_close(params[i].detach(), tensor<double>(ref[i], params[i].sizes()), rtol, 1e-12))
        << "param " << i;
  }
}

struct SgdRef {
  double lr, momentum, dampening, wd;
  bool nesterov;
  std::vector<std::vector<double>> buf;
  void step(std::vector<double>& w, const std::vector<double>& g, size_t i) {
    if (buf.size() <= i) buf.resize(i + 1);
    const bool first = buf[i].empty();
    if (first) buf[i].resize(w.size());
    for (size_t k = 0; k < w.size(); ++k) {
      double d = g[k] + wd * w[k];
      if (momentum != 0.0) {
        buf[i][k] = first ? d : momentum * buf[i][k] + (1.0 - dampening) * d;
        d = nesterov ? d + momentum * buf[i][k] : buf[i][k];
      }
      w[k] -= lr * d;
    }
  }
};

void check_sgd(optim::SgdOptions o, uint64_t seed) {
  auto prob = make_problem(seed, 4);
  auto ref_w = values(prob.params);
  SgdRef ref{o.lr, o.momentum, o.dampening, o.weight_decay, o.nesterov, {}};
  optim::SGD opt(prob.params, o);
  for (int s = 0; s < 4; ++s) {
    set_grads(prob.params, prob.grads[s]);
    opt.step();
    for (size_t i = 0; i < ref_w.size(); ++i) ref.step(ref_w[i], prob.grads[s][i].to_vector<double>(), i);
  }
  expect_params(prob.params, ref_w);
}

TEST(OptimSgd, PlainMatchesReference) {
  check_sgd({.lr = 0.1}, test_seed());
}
TEST(OptimSgd, MomentumDampeningWeightDecayMatchesReference) {
  check_sgd({.lr = 0.05, .momentum = 0.9, .dampening = 0.3, .weight_decay = 0.01}, test_seed());
}
TEST(OptimSgd, NesterovMatchesReference) {
  check_sgd({.lr = 0.05, .momentum = 0.8, .weight_decay = 1e-3, .nesterov = true}, test_seed());
}
TEST(OptimSgd, NesterovNeedsMomentum) {
  auto prob = make_problem(test_seed(), 1);
  EXPECT_NABLA_ERROR(optim::SGD(prob.params, {.lr = 0.1, .nesterov = true}), "nesterov", "momentum");
  EXPECT_NABLA_ERROR(optim::SGD(prob.params, {.lr = -1.0}), "lr");
}

struct AdamRef {
  double lr, b1, b2, eps, wd;
  bool decoupled, amsgrad;
  std::vector<std::vector<double>> m, v, vmax;
  std::vector<int> t;
  void step(std::vector<double>& w, const std::vector<double>& grad, size_t i) {
    if (m.size() <= i) m.resize(i + 1), v.resize(i + 1), vmax.resize(i + 1), t.resize(i + 1);
    if (m[i].empty()) m[i].assign(w.size(), 0.0), v[i].assign(w.size(), 0.0), vmax[i].assign(w.size(), 0.0);
    const int n = ++t[i];
    const double bc1 = 1.0 - std::pow(b1, n), bc2 = 1.0 - std::pow(b2, n);
    for (size_t k = 0; k < w.size(); ++k) {
      double g = grad[k];
      if (decoupled) {
        w[k] *= 1.0 - lr * wd;
      } else {
        g += wd * w[k];
      }
      m[i][k] = b1 * m[i][k] + (1 - b1) * g;
      v[i][k] = b2 * v[i][k] + (1 - b2) * g * g;
      vmax[i][k] = std::max(vmax[i][k], v[i][k]);
      const double denom = std::sqrt(amsgrad ? vmax[i][k] : v[i][k]) / std::sqrt(bc2) + eps;
      w[k] -= lr / bc1 * m[i][k] / denom;
    }
  }
};

template <typename Opt, typename Options>
void check_adam(Options o, bool decoupled, uint64_t seed) {
  auto prob = make_problem(seed, 5);
  auto ref_w = values(prob.params);
  AdamRef ref{o.lr, o.beta1, o.beta2, o.eps, o.weight_decay, decoupled, o.amsgrad, {}, {}, {}, {}};
  Opt opt(prob.params, o);
  for (int s = 0; s < 5; ++s) {
    // Gradients shrink over the steps so amsgrad's running max matters.
    TensorList g;
    for (auto& t : prob.grads[s]) g.push_back(t * (1.0 / (s + 1)));
    set_grads(prob.params, g);
    opt.step();
    for (size_t i = 0; i < ref_w.size(); ++i) ref.step(ref_w[i], g[i].to_vector<double>(), i);
  }
  expect_params(prob.params, ref_w, 1e-10);
}

TEST(OptimAdam, BiasCorrectionMatchesReference) {
  check_adam<optim::Adam>(optim::AdamOptions{.lr = 0.01, .beta1 = 0.8, .beta2 = 0.95}, false, test_seed());
}
TEST(OptimAdam, L2WeightDecayMatchesReference) {
  check_adam<optim::Adam>(optim::AdamOptions{.lr = 0.01, .weight_decay = 0.1}, false, test_seed());
}
TEST(OptimAdam, AmsgradMatchesReference) {
  check_adam<optim::Adam>(optim::AdamOptions{.lr = 0.01, .beta2 = 0.9, .eps = 1e-3, .amsgrad = true}, false,
                          test_seed());
}
TEST(OptimAdamW, DecoupledWeightDecayMatchesReference) {
  check_adam<optim::AdamW>(optim::AdamWOptions{.lr = 0.02, .weight_decay = 0.1}, true, test_seed());
  check_adam<optim::AdamW>(optim::AdamWOptions{.lr = 0.02, .weight_decay = 0.05, .amsgrad = true}, true,
                           test_seed() + 7);
}

TEST(OptimLars, TrustRatioAndGroupExclusionMatchReference) {
  const uint64_t seed = test_seed();
  auto prob = make_problem(seed, 4, {{4, 3}, {6}, {3}});
  const double lr = 0.5, momentum = 0.9, wd = 0.05, eta = 0.02;
  std::vector<ParamGroup> groups(2);
  groups[0].params = {prob.params[0], prob.params[1]};
  groups[1].params = {prob.params[2]};
  groups[1].skip_adaptation = true;
  optim::LARS opt(groups, {.lr = lr, .momentum = momentum, .weight_decay = wd, .eta = eta});
  auto w = values(prob.params);
  std::vector<std::vector<double>> v(3);
  for (auto i : {0, 1, 2}) v[i].assign(w[i].size(), 0.0);
  for (int s = 0; s < 4; ++s) {
    set_grads(prob.params, prob.grads[s]);
    opt.step();
    for (size_t i = 0; i < 3; ++i) {
      auto g = prob.grads[s][i].to_vector<double>();
      const bool skip = i == 2;
      double wn = 0, gn = 0;
      for (size_t k = 0; k < g.size(); ++k) wn += w[i][k] * w[i][k], gn += g[k] * g[k];
      wn = std::sqrt(wn), gn = std::sqrt(gn);
      const double trust = skip ? 1.0 : eta * wn / (gn + wd * wn);
      for (size_t k = 0; k < g.size(); ++k) {
        const double d = g[k] + (skip ? 0.0 : wd * w[i][k]);
        v[i][k] = momentum * v[i][k] + lr * trust * d;
        w[i][k] -= v[i][k];
      }
    }
  }
  expect_params(prob.params, w, 1e-10);
}

TEST(OptimLars, ZeroGradientKeepsTrustRatioOne) {
  Tensor p = random_input({4}, test_seed(), kFloat64, true);
  auto w = p.to_vector<double>();
  optim::LARS opt(TensorList{p}, {.lr = 0.1, .momentum = 0.0, .weight_decay = 0.0});
  p.set_grad(zeros({4}, {.dtype = kFloat64}));
  opt.step();
  EXPECT_TRUE(all_close(p.detach(), tensor<double>(w)));  // no NaN from 0/0
}

TEST(OptimParamGroups, PerGroupHyperParametersOverrideDefaults) {
  auto prob = make_problem(test_seed(), 3);
  std::vector<ParamGroup> groups(2);
  groups[0].params = {prob.params[0]};
  groups[1].params = {prob.params[1]};
  groups[1].lr = 0.3;
  groups[1].weight_decay = 0.0;
  groups[1].momentum = 0.5;
  optim::SGD opt(groups, {.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01});
  EXPECT_DOUBLE_EQ(*opt.param_groups()[0].lr, 0.1);
  EXPECT_DOUBLE_EQ(*opt.param_groups()[1].momentum, 0.5);
  auto w = values(prob.params);
  SgdRef r0{0.1, 0.9, 0.0, 0.01, false, {}}, r1{0.3, 0.5, 0.0, 0.0, false, {}};
  for (int s = 0; s < 3; ++s) {
    set_grads(prob.params, prob.grads[s]);
    opt.step();
    r0.step(w[0], prob.grads[s][0].to_vector<double>(), 0);
    r1.step(w[1], prob.grads[s][1].to_vector<double>(), 0);
  }
  expect_params(prob.params, w);
}

TEST(OptimParamGroups, SplitByNameSubstring) {
  const uint64_t seed = test_seed();
  std::vector<std::pair<std::string, Tensor>> named = {{"conv1.weight", random_input({2}, seed)},
                                                       {"bn1.weight", random_input({2}, seed + 1)},
                                                       {"fc.bias", random_input({2}, seed + 2)},
                                                       {"fc.weight", random_input({2}, seed + 3)}};
  auto groups = optim::param_groups(named, {.no_weight_decay = {"bn", "bias"}}, 1e-4);
  ASSERT_EQ(groups.size(), 2u);
  ASSERT_EQ(groups[0].params.size(), 2u);
  EXPECT_TRUE(groups[0].params[0].is_same(named[0].second));
  EXPECT_TRUE(groups[0].params[1].is_same(named[3].second));
  EXPECT_DOUBLE_EQ(*groups[0].weight_decay, 1e-4);
  ASSERT_EQ(groups[1].params.size(), 2u);
  EXPECT_TRUE(groups[1].params[0].is_same(named[1].second));
  EXPECT_DOUBLE_EQ(*groups[1].weight_decay, 0.0);
  EXPECT_TRUE(groups[1].skip_adaptation);
  EXPECT_FALSE(groups[0].skip_adaptation);
}

// The shape rule picks, in a ResNet, exactly what the names bn*, downsample.1 and *bias pick; in a
// MobileNetV2 (batch norms named features.i.1 and features.i.conv.j) every batch-norm parameter
// and bias, and no convolution or linear weight.
TEST(OptimParamGroups, SplitByShapeFindsEveryNormParameterAndBias) {
  const auto resnet = nn::models::resnet18({.num_classes = 10});
  const auto named = resnet->named_parameters();
  auto groups = optim::param_groups(named, {.no_weight_decay_on_vectors = true}, 1e-4);
  ASSERT_EQ(groups.size(), 2u);
  size_t by_name = 0;
  for (const auto& named_param : named) {  // not a structured binding: the lambda captures p (clang < 16)
    const std::string& name = named_param.first;
    const Tensor& p = named_param.second;
    const bool excluded = name.find("bn") != std::string::npos ||
                          name.find("downsample.1") != std::string::npos ||
                          name.find("bias") != std::string::npos;
    by_name += excluded;
    const auto& group = groups[excluded ? 1 : 0].params;
    EXPECT_TRUE(std::any_of(group.begin(), group.end(), [&](const Tensor& t) { return t.is_same(p); }))
        << name;
  }
  EXPECT_EQ(groups[1].params.size(), by_name);

  const auto mobilenet = nn::models::mobilenet_v2({.num_classes = 10});
  int64_t norm_params = 0, biases = 0, matrices = 0;
  for (const auto& [name, p] : mobilenet->named_parameters()) {
    if (p.dim() >= 2)
      ++matrices;
    else if (name.find("bias") != std::string::npos && name.find("classifier") != std::string::npos)
      ++biases;
    else
      ++norm_params;
  }
  auto split = optim::param_groups(mobilenet->named_parameters(), {.no_weight_decay_on_vectors = true}, 1e-4);
  ASSERT_EQ(split.size(), 2u);
  EXPECT_EQ(static_cast<int64_t>(split[0].params.size()), matrices);  // 52 convolutions and the linear layer
  EXPECT_EQ(static_cast<int64_t>(split[1].params.size()), norm_params + biases);
  EXPECT_EQ(norm_params, 2 * 52);  // one batch norm after every convolution
}

TEST(OptimBase, ZeroGradSetToNoneOrZeroes) {
  auto prob = make_problem(test_seed(), 1);
  optim::SGD opt(prob.params, {.lr = 0.1});
  set_grads(prob.params, prob.grads[0]);
  opt.zero_grad(false);
  for (const auto& p : prob.params) {
    ASSERT_TRUE(p.grad().defined());
    EXPECT_TRUE(all_close(p.grad(), zeros_like(p.detach())));
  }
  opt.zero_grad();
  for (const auto& p : prob.params) EXPECT_FALSE(p.grad().defined());
}

TEST(OptimBase, SkipsParametersWithoutGradientAndBumpsVersions) {
  auto prob = make_problem(test_seed(), 2);
  optim::Adam opt(prob.params, {.lr = 0.1});
  auto before = values(prob.params);
  const auto version = prob.params[0].version();
  prob.params[0].set_grad(prob.grads[0][0].clone());  // params[1] has no gradient
  opt.step();
  EXPECT_GT(prob.params[0].version(), version);
  EXPECT_TRUE(all_close(prob.params[1].detach(), tensor<double>(before[1])));
  EXPECT_FALSE(all_close(prob.params[0].detach(), tensor<double>(before[0], {3, 4})));
  // The skipped parameter's Adam step count starts at its own first update.
  const auto sd = opt.state_dict();
  EXPECT_EQ(sd.count("state.0.1.step"), 0u);
  EXPECT_DOUBLE_EQ(sd.at("state.0.0.step").item<double>(), 1.0);
}

// Save after k steps, load into a fresh optimizer over copies of the parameters, continue:
// identical to running uninterrupted.
template <typename Make>
void check_resume(Make make, uint64_t seed) {
  const int k = 2, n = 5;
  auto prob = make_problem(seed, n);
  TensorList copies;
  for (const auto& p : prob.params) copies.push_back(p.detach().clone().requires_grad_(true));
  auto straight = make(prob.params);
  auto first = make(copies);
  for (int s = 0; s < k; ++s) {
    set_grads(prob.params, prob.grads[s]);
    straight->step();
    set_grads(copies, prob.grads[s]);
    first->step();
  }
  const auto saved = first->state_dict();
  first.reset();
  auto resumed = make(copies);
  resumed->param_groups()[0].lr = 123.0;  // overwritten by the load
  resumed->load_state_dict(saved);
  EXPECT_EQ(resumed->step_count(), k);
  for (int s = k; s < n; ++s) {
    set_grads(prob.params, prob.grads[s]);
    straight->step();
    set_grads(copies, prob.grads[s]);
    resumed->step();
  }
  for (size_t i = 0; i < copies.size(); ++i) {
    EXPECT_TRUE(all_close(copies[i].detach(), prob.params[i].detach(), 0.0, 0.0)) << "param " << i;
  }
}

TEST(OptimStateDict, SgdResumesIdentically) {
  check_resume(
      [](TensorList p) {
        return std::make_unique<optim::SGD>(
            p, optim::SgdOptions{.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01});
      },
      test_seed());
}
TEST(OptimStateDict, AdamResumesIdentically) {
  check_resume(
      [](TensorList p) {
        return std::make_unique<optim::Adam>(p, optim::AdamOptions{.lr = 0.01, .amsgrad = true});
      },
      test_seed());
}
TEST(OptimStateDict, LarsResumesIdentically) {
  check_resume(
      [](TensorList p) {
        return std::make_unique<optim::LARS>(p, optim::LarsOptions{.lr = 0.1, .weight_decay = 0.01});
      },
      test_seed());
}

TEST(OptimStateDict, KeysAndErrors) {
  auto prob = make_problem(test_seed(), 1);
  optim::SGD opt(prob.params, {.lr = 0.1, .momentum = 0.9});
  set_grads(prob.params, prob.grads[0]);
  opt.step();
  auto sd = opt.state_dict();
  EXPECT_EQ(sd.at("state.0.0.momentum_buffer").sizes(), (Shape{3, 4}));
  EXPECT_EQ(sd.at("param_groups.0.lr").dim(), 0);
  EXPECT_DOUBLE_EQ(sd.at("param_groups.0.momentum").item<double>(), 0.9);
  EXPECT_DOUBLE_EQ(sd.at("step").item<double>(), 1.0);
  auto bad = sd;
  bad["state.0.0.momentum_buffer"] = zeros({2}, {.dtype = kFloat64});
  EXPECT_NABLA_ERROR(opt.load_state_dict(bad), "state.0.0.momentum_buffer", "shape");
  bad = sd;
  bad["state.3.0.momentum_buffer"] = zeros({2}, {.dtype = kFloat64});
  EXPECT_NABLA_ERROR(opt.load_state_dict(bad), "state.3.0");
  bad = sd;
  bad.erase("step");
  EXPECT_NABLA_ERROR(opt.load_state_dict(bad), "step");
}

// Found by checkpoint_fuzz: a per-parameter step of 2.4e232 was cast to int64 (undefined) in the
// next Adam step. Counts must be whole numbers in [0, 2^53], learning rates finite, state keys
// numbered, Adam's state complete; and a refused file leaves the optimizer as it was.
TEST(OptimStateDict, MalformedCheckpointEntriesAreRefusedAndChangeNothing) {
  auto prob = make_problem(test_seed(), 1);
  optim::AdamW opt(prob.params, {.lr = 0.1});
  set_grads(prob.params, prob.grads[0]);
  opt.step();
  const auto sd = opt.state_dict();
  auto refused = [&](const std::string& key, const Tensor& value, const std::string& message) {
    auto bad = sd;
    if (value.defined()) {
      bad[key] = value;
    } else {
      bad.erase(key);
    }
    EXPECT_NABLA_ERROR(opt.load_state_dict(bad), message.c_str());
    const auto after = opt.state_dict();
    ASSERT_EQ(after.size(), sd.size()) << key;
    for (const auto& [k, v] : sd)
      EXPECT_TRUE(all_close(after.at(k), v, 0, 0)) << "after " << key << ": " << k;
  };
  const auto scalar = [](double v) { return full({}, v, {.dtype = kFloat64}); };
  refused("state.0.0.step", scalar(2.35922e232), "a count must be a whole number");
  refused("state.0.0.step", scalar(-1), "a count must be a whole number");
  refused("step", scalar(1.5), "a count must be a whole number");
  refused("param_groups.0.lr", scalar(std::nan("")), "must be finite");
  refused("param_groups.0.momentum", scalar(-0.9), "must be finite and >= 0");
  refused("state.x.0.exp_avg", zeros({3, 4}, {.dtype = kFloat64}), "malformed key 'state.x.0.exp_avg'");
  refused("state.0.0.exp_avg_sq", Tensor(), "has state but no 'exp_avg_sq'");
}

}  // namespace
}  // namespace nabla::testing
