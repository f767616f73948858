// nn::make_graphed_step on the GPU: a training step captured into one CUDA graph and replayed
// gives the losses, gradients, weights, buffers and optimizer/scaler state of the same step run
// eagerly, step after step, with deterministic cuDNN: float16 autocast with a GradScaler that
// skips steps on the device and SGD under a cosine schedule (the learning rate reaches the
// graph through its replay hook); dropout, AdamW with a warm-up schedule and gradient clipping
// (the Philox offsets come from device memory, so every replay draws what the eager step would);
// a checkpointed ResNet. Then the fallbacks: a step that reads a device value stays eager and
// says why, a partial batch runs eagerly once, and an optimizer that cannot be captured fails
// the capture with its name.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <memory>

#include "test_util.h"

namespace nabla::testing {
namespace {

// Deterministic convolutions without the benchmark search (the other routes kept), restored
// after the test.
Routes deterministic_routes() {
  Routes r = routes();
  r.cudnn_deterministic = true;
  r.cudnn_benchmark = false;
  return r;
}
struct Deterministic {
  RoutesGuard guard{deterministic_routes()};
};

struct Batch {
  Tensor x, y;
};

Batch make_batch(uint64_t seed, int64_t n, int64_t channels, int64_t size, MemoryFormat format) {
  Tensor x = random_input({n, channels, size, size}, seed, kFloat32).to(Device::cuda()).contiguous(format);
  Generator gen(seed + 1);
  Tensor y = randint(0, 10, {n}, {.dtype = kInt64}, &gen).to(Device::cuda());
  return {x, y};
}

void expect_same_tensors(const std::vector<std::pair<std::string, Tensor>>& got,
                         const std::vector<std::pair<std::string, Tensor>>& want, double rtol, double atol) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_TRUE(all_close(got[i].second, want[i].second, rtol, atol)) << got[i].first;
  }
}

void expect_same_grads(nn::Module& got, nn::Module& want, double rtol, double atol) {
  auto a = got.named_parameters(), b = want.named_parameters();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].second.grad().defined(), b[i].second.grad().defined()) << a[i].first;
    if (a[i].second.grad().defined())
      EXPECT_TRUE(all_close(a[i].second.grad(), b[i].second.grad(), rtol, atol)) << a[i].first << ".grad";
  }
}

// A ResNet-18 (CIFAR stem) with SGD, a GradScaler and a cosine schedule, in channels_last.
struct ResNetRun {
  std::shared_ptr<nn::models::ResNet> model;
  std::unique_ptr<optim::SGD> opt;
  std::unique_ptr<optim::CosineLR> schedule;
  amp::GradScaler scaler;

  ResNetRun(uint64_t seed, int checkpoint_segments, double init_scale)
      : scaler({.init_scale = init_scale, .growth_interval = 2}) {
    manual_seed(seed);
    model = nn::models::resnet18(
        {.num_classes = 10, .small_input_stem = true, .checkpoint_segments = checkpoint_segments});
    model->to(Device::cuda(), MemoryFormat::ChannelsLast);
    opt = std::make_unique<optim::SGD>(
        model->parameters(),
        optim::SgdOptions{.lr = 0.05, .momentum = 0.9, .weight_decay = 1e-4, .nesterov = true});
    schedule =
        std::make_unique<optim::CosineLR>(*opt, optim::CosineLROptions{.total_steps = 12, .warmup_steps = 3});
  }

  Tensor step(const Tensor& x, const Tensor& y, bool half) {
    opt->zero_grad();
    Tensor loss;
    {
      amp::Autocast autocast(Device::cuda(), kFloat16, half);
      loss = cross_entropy(model->forward(x), y);
    }
    scaler.scale(loss).backward();
    scaler.step(*opt);
    scaler.update();
    return loss;
  }
};

void check_resnet_graph_equals_eager(uint64_t seed, int checkpoint_segments, bool half) {
  Deterministic deterministic;
  // A large initial scale overflows float16 gradients: the first steps are skipped on the device.
  const double init_scale = half ? 1 << 24 : 1.0;
  ResNetRun eager(seed, checkpoint_segments, init_scale), graphed(seed, checkpoint_segments, init_scale);
  auto step = nn::make_graphed_step(
      [&](const Tensor& x, const Tensor& y) { return graphed.step(x, y, half); }, {.warmup = 2});
  constexpr int kSteps = 8;
  for (int s = 0; s < kSteps; ++s) {
    Batch b = make_batch(seed + 100 * s, 8, 3, 16, MemoryFormat::ChannelsLast);
    const double want = eager.step(b.x, b.y, half).item<double>();
    const double got = step(b.x, b.y).item<double>();
    EXPECT_NEAR(got, want, 1e-6 * std::abs(want)) << "step " << s;
    eager.schedule->step();
    graphed.schedule->step();
  }
  EXPECT_TRUE(step.graphed()) << step.eager_reason();
  EXPECT_EQ(step.replays(), kSteps - 2);
  EXPECT_EQ(graphed.opt->step_count(), eager.opt->step_count());
  EXPECT_EQ(graphed.scaler.get_scale(), eager.scaler.get_scale());
  if (half)
    EXPECT_LT(eager.scaler.get_scale(), init_scale) << "no step overflowed: the skip path went untested";
  expect_same_grads(*graphed.model, *eager.model, 1e-5, 1e-7);
  expect_same_tensors(graphed.model->named_parameters(), eager.model->named_parameters(), 1e-5, 1e-7);
  expect_same_tensors(graphed.model->named_buffers(), eager.model->named_buffers(), 1e-5, 1e-7);
  auto got_state = graphed.opt->state_dict(), want_state = eager.opt->state_dict();
  for (const auto& [key, value] : want_state)
    EXPECT_TRUE(all_close(got_state.at(key), value, 1e-5, 1e-7)) << key;
}

TEST(CudaGraphedStep, Float16ResNetStepWithScalerAndScheduleEqualsEager) {
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  check_resnet_graph_equals_eager(test_seed(), 0, true);
}

TEST(CudaGraphedStep, CheckpointedResNetStepEqualsEager) {
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  check_resnet_graph_equals_eager(test_seed(), 2, false);
}

// An MLP with dropout, AdamW under a warm-up schedule and gradient clipping, in float32.
struct MlpRun {
  std::shared_ptr<nn::Sequential> model;
  std::unique_ptr<optim::AdamW> opt;
  std::unique_ptr<optim::CosineLR> schedule;

  explicit MlpRun(uint64_t seed) {
    manual_seed(seed);
    model = std::make_shared<nn::Sequential>();
    model->push_back(std::make_shared<nn::Linear>(nn::LinearOptions{.in = 32, .out = 64}));
    model->push_back(std::make_shared<nn::ReLU>());
    model->push_back(std::make_shared<nn::Dropout>(0.3));
    model->push_back(std::make_shared<nn::Linear>(nn::LinearOptions{.in = 64, .out = 10}));
    model->to(Device::cuda());
    opt = std::make_unique<optim::AdamW>(model->parameters(),
                                         optim::AdamWOptions{.lr = 3e-3, .weight_decay = 0.1});
    schedule =
        std::make_unique<optim::CosineLR>(*opt, optim::CosineLROptions{.total_steps = 20, .warmup_steps = 5});
  }

  Tensor step(const Tensor& x, const Tensor& y) {
    opt->zero_grad();
    Tensor loss = cross_entropy(model->forward(x), y);
    loss.backward();
    optim::clip_grad_norm_(model->parameters(), 0.5);
    opt->step();
    return loss;
  }
};

TEST(CudaGraphedStep, DropoutAdamWClipAndWarmupEqualEagerAndDrawFreshNumbers) {
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const uint64_t seed = test_seed();
  auto data = [&](int s) {
    Tensor x = random_input({16, 32}, seed + 10 * s, kFloat32).to(Device::cuda());
    Generator gen(seed + 10 * s + 1);
    return Batch{x, randint(0, 10, {16}, {.dtype = kInt64}, &gen).to(Device::cuda())};
  };
  constexpr int kSteps = 9;
  // The eager run first, from the seed, so both draw from the same generator state.
  MlpRun eager(seed);
  std::vector<double> losses;
  for (int s = 0; s < kSteps; ++s) {
    Batch b = data(s);
    losses.push_back(eager.step(b.x, b.y).item<double>());
    eager.schedule->step();
  }
  const uint64_t eager_offset = default_generator(Device::cuda()).state().offset;

  MlpRun graphed(seed);
  auto step = nn::make_graphed_step([&](const Tensor& x, const Tensor& y) { return graphed.step(x, y); },
                                    {.warmup = 1});
  for (int s = 0; s < kSteps; ++s) {
    Batch b = data(s);
    EXPECT_NEAR(step(b.x, b.y).item<double>(), losses[s], 1e-6 * std::abs(losses[s])) << "step " << s;
    graphed.schedule->step();
  }
  EXPECT_TRUE(step.graphed()) << step.eager_reason();
  EXPECT_EQ(step.replays(), kSteps - 1);
  EXPECT_EQ(default_generator(Device::cuda()).state().offset, eager_offset);
  expect_same_tensors(graphed.model->named_parameters(), eager.model->named_parameters(), 1e-5, 1e-7);
  auto got_state = graphed.opt->state_dict(), want_state = eager.opt->state_dict();
  for (const auto& [key, value] : want_state)
    EXPECT_TRUE(all_close(got_state.at(key), value, 1e-5, 1e-7)) << key;
  EXPECT_DOUBLE_EQ(got_state.at("state.0.0.step").item<double>(), kSteps);
}

TEST(CudaGraphedStep, AStepThatReadsADeviceValueStaysEagerAndSaysWhy) {
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  MlpRun run(test_seed());
  double last = 0;
  auto step = nn::make_graphed_step(
      [&](const Tensor& x, const Tensor& y) {
        Tensor loss = run.step(x, y);
        last = loss.item<double>();  // a host read inside the step
        return loss;
      },
      {.warmup = 1});
  for (int s = 0; s < 3; ++s) {
    Batch b{random_input({4, 32}, test_seed() + s, kFloat32).to(Device::cuda()),
            zeros({4}, {.dtype = kInt64, .device = Device::cuda()})};
    EXPECT_EQ(step(b.x, b.y).item<double>(), last);
  }
  EXPECT_FALSE(step.graphed());
  EXPECT_EQ(step.eager_calls(), 3);
  EXPECT_NE(step.eager_reason().find("wait for the GPU"), std::string::npos) << step.eager_reason();
  EXPECT_NE(step.eager_reason().find("copy from the GPU to the host"), std::string::npos)
      << step.eager_reason();
}

// Embedding checks its indices on the device (Note [Checks on the device]), so a language model's
// step is captured; a bad token in a replayed batch is reported at the next read of the loss.
TEST(CudaGraphedStep, AnEmbeddingStepIsCapturedAndABadTokenIsReportedAtTheNextRead) {
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const uint64_t seed = test_seed();
  manual_seed(seed);
  nn::Embedding embed(50, 16);
  nn::Linear head({.in = 16, .out = 50});
  embed.to(Device::cuda());
  head.to(Device::cuda());
  TensorList params = embed.parameters();
  for (const Tensor& p : head.parameters()) params.push_back(p);
  optim::SGD opt(params, {.lr = 0.1});
  auto run = [&](const Tensor& tokens, const Tensor& targets) {
    Tensor loss = cross_entropy(head(embed(tokens)), targets);
    loss.backward();
    opt.step();
    opt.zero_grad();
    return loss.detach();
  };
  auto step = nn::make_graphed_step(run, {.warmup = 1});
  Generator gen(seed + 1);
  for (int s = 0; s < 3; ++s) {
    Tensor tokens = randint(0, 50, {32}, {.dtype = kInt64}, &gen).to(Device::cuda());
    Tensor targets = randint(0, 50, {32}, {.dtype = kInt64}, &gen).to(Device::cuda());
    EXPECT_TRUE(std::isfinite(step(tokens, targets).item<double>()));
  }
  EXPECT_TRUE(step.graphed()) << step.eager_reason();
  EXPECT_EQ(step.replays(), 2);
  const Tensor bad =
      cat({full({31}, 7, {.dtype = kInt64}), full({1}, 50, {.dtype = kInt64})}, 0).to(Device::cuda());
  Tensor loss = step(bad, zeros({32}, {.dtype = kInt64, .device = Device::cuda()}));
  EXPECT_NABLA_ERROR(loss.item<double>(), "embedding", "index 50 is out of range", "< 50");
  EXPECT_EQ(step.replays(), 3);
}

TEST(CudaGraphedStep, APartialBatchRunsEagerlyAndTheNextFullOneReplays) {
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const uint64_t seed = test_seed();
  MlpRun eager(seed), graphed(seed);
  auto step = nn::make_graphed_step([&](const Tensor& x, const Tensor& y) { return graphed.step(x, y); },
                                    {.warmup = 1});
  const int64_t sizes[] = {8, 8, 8, 5, 8};
  for (int s = 0; s < 5; ++s) {
    Tensor x = random_input({sizes[s], 32}, seed + s, kFloat32).to(Device::cuda());
    Tensor y = zeros({sizes[s]}, {.dtype = kInt64, .device = Device::cuda()});
    // Dropout draws differ between the two runs' generator use only if the graph misdraws.
    manual_seed(seed + 1000 * s);
    const double want = eager.step(x, y).item<double>();
    manual_seed(seed + 1000 * s);
    EXPECT_NEAR(step(x, y).item<double>(), want, 1e-6 * std::abs(want)) << "step " << s;
    if (s == 3) {
      EXPECT_NE(step.eager_reason().find("partial batch"), std::string::npos) << step.eager_reason();
    }
  }
  EXPECT_EQ(step.eager_calls(), 2);  // the warm-up call and the partial batch
  EXPECT_EQ(step.replays(), 3);
  EXPECT_TRUE(step.eager_reason().empty());
  expect_same_tensors(graphed.model->named_parameters(), eager.model->named_parameters(), 1e-5, 1e-7);
}

TEST(CudaGraphedStep, AnOptimizerThatCannotBeCapturedFailsTheCaptureByName) {
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  Tensor w = random_input({8, 4}, test_seed(), kFloat32).to(Device::cuda()).requires_grad_(true);
  optim::LARS opt({w}, {.lr = 0.1, .momentum = 0.9});
  auto step = nn::make_graphed_step(
      [&](const Tensor& x) {
        opt.zero_grad();
        Tensor loss = sum(mul(matmul(x, w), matmul(x, w)));
        loss.backward();
        opt.step();
        return loss;
      },
      {.warmup = 1});
  Tensor x = random_input({3, 8}, test_seed() + 1, kFloat32).to(Device::cuda());
  step(x);
  EXPECT_NABLA_ERROR(step(x), "capturing the step into a CUDA graph failed", "LARS cannot be captured");
  EXPECT_FALSE(step.graphed());
}

TEST(CudaGraphedStep, ChangingMomentumAfterTheCaptureFailsTheReplayAndChangesNothing) {
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  Tensor w = random_input({8, 4}, test_seed(), kFloat32).to(Device::cuda()).requires_grad_(true);
  optim::SGD opt({w}, {.lr = 0.1, .momentum = 0.9});
  auto step = nn::make_graphed_step(
      [&](const Tensor& x) {
        opt.zero_grad();
        Tensor loss = sum(mul(matmul(x, w), matmul(x, w)));
        loss.backward();
        opt.step();
        return loss;
      },
      {.warmup = 1});
  Tensor x = random_input({3, 8}, test_seed() + 1, kFloat32).to(Device::cuda());
  step(x);
  step(x);  // captured and replayed
  ASSERT_TRUE(step.graphed());
  const int64_t steps = opt.step_count();
  const uint64_t offset = default_generator(Device::cuda()).state().offset;
  const Tensor before = w.detach().clone();
  *opt.param_groups()[0].momentum = 0.5;
  EXPECT_NABLA_ERROR(step(x), "SGD: group 0 changed weight_decay/momentum", "only lr may change");
  EXPECT_EQ(opt.step_count(), steps);
  EXPECT_EQ(default_generator(Device::cuda()).state().offset, offset);
  EXPECT_TRUE(all_close(w.detach(), before, 0.0, 0.0));
  *opt.param_groups()[0].momentum = 0.9;
  step(x);
  EXPECT_EQ(opt.step_count(), steps + 1);
}

}  // namespace
}  // namespace nabla::testing
