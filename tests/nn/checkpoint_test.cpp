// Gradient checkpointing: the gradients of every parameter and of the input equal those of the
// same model run without checkpointing (float64, fresh random weights and inputs), with dropout
// (same RNG replayed), in-place ReLU at and inside segment edges, BatchNorm, several segment
// counts, bfloat16 autocast, the forward's routes, and a ResNet with checkpoint_segments. Also: the segment's
// activations are really not kept.
#include <gtest/gtest.h>

#include "nabla/core/cpu_memory.h"
#include "test_util.h"

namespace nabla::nn {
namespace {

using nabla::testing::all_close;
using nabla::testing::random_input;
using nabla::testing::test_seed;

// conv-bn-relu(in place)-dropout-conv-relu(in place)-pool-flatten-linear, as separate modules so
// segment edges fall everywhere, including right before the in-place ReLUs.
std::shared_ptr<Sequential> make_net() {
  auto seq = std::make_shared<Sequential>();
  seq->emplace_back<Conv2d>(Conv2dOptions{.in = 3, .out = 8, .kernel = 3, .padding = 1});
  seq->emplace_back<BatchNorm2d>(8);
  seq->emplace_back<ReLU>(ReLUOptions{.inplace = true});
  seq->emplace_back<Dropout>(0.3);
  seq->emplace_back<Conv2d>(Conv2dOptions{.in = 8, .out = 8, .kernel = 3, .padding = 1});
  seq->emplace_back<ReLU>(ReLUOptions{.inplace = true});
  seq->emplace_back<AdaptiveAvgPool2d>(PoolPair{1, 1});
  seq->emplace_back<Flatten>();
  seq->emplace_back<Linear>(LinearOptions{.in = 8, .out = 5});
  return seq;
}

// Runs forward + backward from the same generator state; returns every gradient (params, input).
std::vector<Tensor> gradients(Sequential& net, const Tensor& x0, int segments, uint64_t rng_seed) {
  net.zero_grad();
  manual_seed(rng_seed);
  Tensor x = x0.detach().requires_grad_(true);
  Tensor y = segments > 0 ? checkpoint_sequential(net, segments, x) : net.forward(x);
  Tensor w = random_input(y.sizes(), 99, kFloat64);
  (y * w).sum().backward();
  std::vector<Tensor> grads;
  for (auto& p : net.parameters()) grads.push_back(p.grad().clone());
  grads.push_back(x.grad().clone());
  return grads;
}

TEST(Checkpoint, SequentialGradientsEqualTheUncheckpointedOnes) {
  const uint64_t seed = test_seed();
  manual_seed(seed);
  auto net = make_net();
  net->to(kFloat64);
  Tensor x = random_input({4, 3, 6, 6}, seed + 1, kFloat64);
  auto expected = gradients(*net, x, 0, seed + 2);
  for (int segments : {1, 2, 3, 5, 9}) {
    auto actual = gradients(*net, x, segments, seed + 2);
    ASSERT_EQ(actual.size(), expected.size());
    for (size_t i = 0; i < actual.size(); ++i) {
      EXPECT_TRUE(all_close(actual[i], expected[i], 1e-10, 1e-12))
          << "segments " << segments << ", grad " << i;
    }
  }
}

TEST(Checkpoint, DropoutMaskIsReplayedNotRedrawn) {
  // With a different RNG state at backward time the mask would differ; the test above would
  // then fail. Here: the generator moves on between forward and backward, and gradients still
  // match, and the generator is left where the caller put it.
  const uint64_t seed = test_seed();
  manual_seed(seed);
  auto net = make_net();
  net->to(kFloat64);
  Tensor x = random_input({2, 3, 5, 5}, seed + 1, kFloat64);
  auto expected = gradients(*net, x, 0, seed + 3);
  net->zero_grad();
  manual_seed(seed + 3);
  Tensor xr = x.detach().requires_grad_(true);
  Tensor y = checkpoint_sequential(*net, 3, xr);
  Tensor w = random_input(y.sizes(), 99, kFloat64);
  rand({1000});  // draws between forward and backward
  PhiloxState before = default_generator().state();
  (y * w).sum().backward();
  EXPECT_EQ(default_generator().state().offset, before.offset) << "backward must restore the generator";
  auto params = net->parameters();
  for (size_t i = 0; i < params.size(); ++i)
    EXPECT_TRUE(all_close(params[i].grad(), expected[i], 1e-10, 1e-12));
}

TEST(Checkpoint, InPlaceOpOnTheSegmentInputKeepsTheCallersValue) {
  // A segment whose first op is an in-place ReLU on its input.
  const uint64_t seed = test_seed();
  Tensor x = random_input({3, 7}, seed, kFloat64, true);
  Tensor before = x.detach().clone();
  auto segment = [](const Tensor& t) {
    Tensor input = t;
    relu_(input);  // in place on the segment's own input
    return input * input;
  };
  Tensor y = checkpoint(segment, x);
  EXPECT_TRUE(all_close(x.detach(), before, 0, 0)) << "the caller's tensor was overwritten";
  y.sum().backward();
  // d/dx relu(x)^2 = 2 relu(x)
  EXPECT_TRUE(all_close(x.grad(), relu(before) * 2.0, 1e-12, 1e-12));
}

TEST(Checkpoint, BFloat16AutocastStateIsReplayed) {
  const uint64_t seed = test_seed();
  manual_seed(seed);
  Linear fc1({.in = 6, .out = 12}), fc2({.in = 12, .out = 3});
  Tensor x = random_input({5, 6}, seed + 1, kFloat32);
  auto run = [&](bool use_checkpoint) {
    fc1.zero_grad();
    fc2.zero_grad();
    Tensor y;
    {
      amp::Autocast autocast(Device::cpu(), kBFloat16);
      auto segment = [&](const Tensor& t) { return fc2(relu(fc1(t))); };
      y = use_checkpoint ? checkpoint(segment, x) : segment(x);
    }
    EXPECT_EQ(y.dtype(), kBFloat16);
    y.to(kFloat32).sum().backward();
    return std::pair{fc1.weight.grad().clone(), fc2.weight.grad().clone()};
  };
  auto [a1, a2] = run(false);
  auto [b1, b2] = run(true);
  EXPECT_EQ(b1.dtype(), kFloat32);
  EXPECT_TRUE(all_close(b1, a1, 0, 0)) << "the recompute must run in bfloat16 like the first run";
  EXPECT_TRUE(all_close(b2, a2, 0, 0));
}

// The replay runs under the routes of the first run (a guard around the forward, none around
// backward), and the routes in force at backward are back afterwards. The segment reports what
// it sees; its gradient is checked against the plain product's.
TEST(Checkpoint, RoutesOfTheFirstRunAreReplayed) {
  const uint64_t seed = test_seed();
  const Tensor w = random_input({4, 3}, seed, kFloat64);
  const Tensor x = random_input({2, 4}, seed + 1, kFloat64).requires_grad_(true);
  std::vector<bool> seen;
  auto segment = [&](const Tensor& t) {
    seen.push_back(routes().cudnn_deterministic);
    return matmul(t, w);
  };
  Tensor y;
  {
    const RoutesGuard guard({.cudnn_deterministic = true});
    y = checkpoint(segment, x);
  }
  ASSERT_FALSE(routes().cudnn_deterministic);
  y.sum().backward();
  EXPECT_EQ(seen, (std::vector<bool>{true, true})) << "first run and replay under the forward's routes";
  EXPECT_FALSE(routes().cudnn_deterministic) << "the routes of backward are restored";
  EXPECT_TRUE(all_close(x.grad(), matmul(ones({2, 3}, {.dtype = kFloat64}), w.t()), 1e-12, 1e-12));
}

TEST(Checkpoint, ResNetWithSegmentsMatchesWithout) {
  const uint64_t seed = test_seed();
  manual_seed(seed);
  auto model = models::resnet18({.num_classes = 4, .in_channels = 2, .small_input_stem = true});
  model->to(kFloat64);
  Tensor x = random_input({2, 2, 8, 8}, seed + 1, kFloat64);
  auto grads = [&](int segments) {
    model->set_checkpoint_segments(segments);
    model->zero_grad();
    Tensor xr = x.detach().requires_grad_(true);
    // BatchNorm updates running stats in both runs of a segment; compare gradients only.
    (model->forward(xr) * random_input({2, 4}, 7, kFloat64)).sum().backward();
    std::vector<Tensor> g;
    for (auto& p : model->parameters()) g.push_back(p.grad().clone());
    g.push_back(xr.grad().clone());
    return g;
  };
  auto expected = grads(0);
  for (int segments : {2, 8}) {
    auto actual = grads(segments);
    for (size_t i = 0; i < actual.size(); ++i)
      EXPECT_TRUE(all_close(actual[i], expected[i], 1e-9, 1e-11))
          << "segments " << segments << ", grad " << i;
  }
}

TEST(Checkpoint, SegmentActivationsAreNotKept) {
  // Count the tensors the graph keeps alive: a deep chain of 40 tanh layers keeps 40 saved
  // activations without checkpointing, and only the segment inputs with it.
  const uint64_t seed = test_seed();
  Tensor x = random_input({64, 64}, seed, kFloat64, true);
  auto chain = [](const Tensor& t) {
    Tensor y = t;
    for (int i = 0; i < 40; ++i) y = tanh(y);
    return y;
  };
  std::weak_ptr<Storage> inner;  // the memory of an activation inside the segment
  auto probe = [&](const Tensor& t) {
    Tensor y = tanh(t);
    inner = y.storage();
    return chain(y);
  };
  Tensor y_plain = probe(x);
  EXPECT_FALSE(inner.expired()) << "without checkpointing the graph keeps inner activations";
  Tensor y_ckpt = checkpoint(probe, x);
  EXPECT_TRUE(inner.expired()) << "a checkpointed segment must not keep inner activations";
  y_ckpt.sum().backward();
  Tensor g_ckpt = x.grad().clone();
  x.mutable_grad().zero_();
  y_plain.sum().backward();
  EXPECT_TRUE(all_close(g_ckpt, x.grad(), 1e-12, 1e-12));
}

TEST(Checkpoint, ResNetKeepsFarLessForBackward) {
  // What checkpointing saves: the memory forward leaves behind for backward (the activations).
  // With 4 segments only the segment inputs (and the last segment's activations) remain. The
  // peak of the whole step must not grow either (backward recomputes one segment at a time).
  const uint64_t seed = test_seed();
  manual_seed(seed);
  auto model = models::resnet18({.num_classes = 10, .small_input_stem = true});
  Tensor x = random_input({8, 3, 32, 32}, seed + 1, kFloat32);
  struct Usage {
    size_t kept = 0;  // held after forward
    size_t peak = 0;  // during forward and backward
  };
  auto usage = [&](int segments) {
    model->set_checkpoint_segments(segments);
    model->zero_grad();
    size_t base = cpu_memory_allocated();
    cpu_reset_peak_memory_stats();
    Tensor out = model->forward(x);
    Usage u{.kept = cpu_memory_allocated() - base};
    out.sum().backward();
    u.peak = cpu_max_memory_allocated() - base;
    return u;
  };
  usage(0);  // warm-up: lazily created state
  Usage plain = usage(0), ckpt = usage(4);
  std::printf(
      "resnet18 batch 8 32x32: kept for backward %.1f MiB plain, %.1f MiB with 4 segments; step peak "
      "%.1f / %.1f MiB\n",
      plain.kept / 1048576.0, ckpt.kept / 1048576.0, plain.peak / 1048576.0, ckpt.peak / 1048576.0);
  EXPECT_LT(static_cast<double>(ckpt.kept), 0.4 * static_cast<double>(plain.kept));
  EXPECT_LE(static_cast<double>(ckpt.peak), 1.05 * static_cast<double>(plain.peak));
}

TEST(Checkpoint, BadArgumentsAreClearErrors) {
  Sequential empty;
  EXPECT_NABLA_ERROR(checkpoint_sequential(empty, 2, random_input({2}, 1)), "no modules");
  auto net = make_net();
  EXPECT_NABLA_ERROR(checkpoint_sequential(*net, 0, random_input({1, 3, 4, 4}, 1, kFloat32)), "at least 1");
}

}  // namespace
}  // namespace nabla::nn
