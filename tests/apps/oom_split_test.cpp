// --oom-policy split (OomSplitter), tested on CPU with an injected out-of-memory
// (set_cpu_memory_limit): training under a limit that a full-batch step exceeds must split the
// batch and end with the same weights as an unlimited run that never split.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "nabla/apps/train_support/oom_split.h"
#include "nabla/core/cuda/memory.h"
#include "tiny_mlp.h"

namespace nabla::train_support {
namespace {

using namespace nabla::testing;

// Lifts the CPU limit when the test ends, whatever happens.
struct LimitGuard {
  ~LimitGuard() { set_cpu_memory_limit(0); }
};

void expect_same_tensors(const TensorList& actual, const TensorList& expected, double rtol, double atol) {
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t i = 0; i < actual.size(); ++i) {
    EXPECT_TRUE(all_close(actual[i].detach(), expected[i].detach(), rtol, atol)) << "tensor " << i;
  }
}

TensorList grads_of(const TinyMlp& model) {
  TensorList grads;
  for (const auto& p : model.parameters()) grads.push_back(p.grad().clone());
  return grads;
}

TEST(MicroBatchRanges, CoverTheBatchInNearlyEqualPiecesLargerFirst) {
  using Ranges = std::vector<std::pair<int64_t, int64_t>>;
  EXPECT_EQ(micro_batch_ranges(7, 3), (Ranges{{0, 3}, {3, 5}, {5, 7}}));
  EXPECT_EQ(micro_batch_ranges(8, 2), (Ranges{{0, 4}, {4, 8}}));
  EXPECT_EQ(micro_batch_ranges(5, 5), (Ranges{{0, 1}, {1, 2}, {2, 3}, {3, 4}, {4, 5}}));
  EXPECT_EQ(micro_batch_ranges(5, 1), (Ranges{{0, 5}}));
  EXPECT_NABLA_ERROR(micro_batch_ranges(4, 5), "1 <= split <= batch", "batch 4", "split 5");
}

TEST(OomSplit, AccumulatedGradientOfUnevenMicroBatchesEqualsTheFullBatchGradient) {
  const uint64_t seed = test_seed();
  MlpBatch data = random_mlp_batch(7, seed);
  auto reference = make_tiny_mlp(seed);
  Tensor full_loss = mlp_forward_backward(*reference, data.input, data.target);

  auto model = make_tiny_mlp(seed);
  OomSplitter splitter([&] { model->zero_grad(); }, {.initial_split = 3});  // 3 + 2 + 2 rows
  std::vector<double> weights;
  Tensor loss = splitter.run_step(data.input, data.target, [&](const Tensor& x, const Tensor& y, double w) {
    weights.push_back(w);
    return mlp_forward_backward(*model, x, y, w);
  });
  EXPECT_EQ(weights, (std::vector<double>{3.0 / 7, 2.0 / 7, 2.0 / 7}));
  EXPECT_NEAR(loss.item<float>(), full_loss.item<float>(), 1e-5 * std::abs(full_loss.item<float>()));
  expect_same_tensors(grads_of(*model), grads_of(*reference), 1e-5, 1e-7);
  EXPECT_TRUE(splitter.events().empty());
}

// The heart of the policy: a limit between what a half-batch step and a full-batch step need.
TEST(OomSplit, TrainingUnderALimitSplitsOnceAndMatchesAnUnlimitedRun) {
  const uint64_t seed = test_seed();
  constexpr int64_t kBatch = 256;
  constexpr int kSteps = 5;
  const size_t full = mlp_step_extra_bytes(kBatch), half = mlp_step_extra_bytes(kBatch / 2);
  const size_t param_bytes = make_tiny_mlp(0)->parameter_bytes();
  // Accumulating the second micro-batch's gradient may need a parameter-sized temporary on top of
  // the half step; the gap between the two must leave room for it on both sides of the budget.
  ASSERT_GT(full, half + 4 * param_bytes) << "the test model's activations must dominate its memory";
  const size_t budget = (full + half) / 2;

  std::vector<MlpBatch> batches;
  for (int s = 0; s < kSteps; ++s) batches.push_back(random_mlp_batch(kBatch, seed + 10 * s));

  // Reference: no limit, whole batches, plain loss.backward().
  auto reference = make_tiny_mlp(seed);
  optim::SGD reference_opt(reference->parameters(), {.lr = 0.05, .momentum = 0.9});
  std::vector<float> reference_losses;
  for (const auto& b : batches) {
    reference_opt.zero_grad();
    reference_losses.push_back(mlp_forward_backward(*reference, b.input, b.target).item<float>());
    reference_opt.step();
  }

  auto model = make_tiny_mlp(seed);
  const TensorList initial = [&] {
    TensorList copy;
    for (const auto& p : model->parameters()) copy.push_back(p.detach().clone());
    return copy;
  }();
  optim::SGD opt(model->parameters(), {.lr = 0.05, .momentum = 0.9});
  OomSplitter splitter([&] { opt.zero_grad(); });
  LimitGuard guard;
  for (int s = 0; s < kSteps; ++s) {
    opt.zero_grad();
    // The step may use `budget` bytes on top of what the model, its optimizer and the data hold.
    set_cpu_memory_limit(cpu_memory_allocated() + budget);
    Tensor loss = splitter.run_step(
        batches[s].input, batches[s].target,
        [&](const Tensor& x, const Tensor& y, double w) { return mlp_forward_backward(*model, x, y, w); });
    set_cpu_memory_limit(0);
    opt.step();
    EXPECT_NEAR(loss.item<float>(), reference_losses[s], 1e-5 * std::abs(reference_losses[s]))
        << "step " << s;
  }
  ASSERT_EQ(splitter.events().size(), 1u) << "the split must happen once and then be kept";
  EXPECT_EQ(splitter.events()[0].step, 0);
  EXPECT_EQ(splitter.events()[0].batch_size, kBatch);
  EXPECT_EQ(splitter.events()[0].old_split, 1);
  EXPECT_EQ(splitter.events()[0].new_split, 2);
  EXPECT_NE(splitter.events()[0].error.find("CPU out of memory"), std::string::npos);
  EXPECT_EQ(splitter.split(), 2);
  EXPECT_EQ(splitter.steps(), kSteps);
  EXPECT_EQ(splitter.take_new_events().size(), 1u);
  EXPECT_TRUE(splitter.take_new_events().empty());
  expect_same_tensors(model->parameters(), reference->parameters(), 1e-5, 1e-6);
  // ...and training did move the weights, so the comparison above means something.
  EXPECT_FALSE(all_close(model->parameters()[0].detach(), initial[0], 1e-3, 1e-4));
}

TEST(OomSplit, WhenNotEvenOneSampleFitsItFailsClearlyAndLeavesNothingBehind) {
  const uint64_t seed = test_seed();
  auto model = make_tiny_mlp(seed);
  MlpBatch data = random_mlp_batch(8, seed);
  int zero_grad_calls = 0;
  OomSplitter splitter([&] {
    ++zero_grad_calls;
    model->zero_grad();
  });
  LimitGuard guard;
  const size_t before = cpu_memory_allocated();
  set_cpu_memory_limit(before + 256);  // not even one sample's hidden layer (2 KiB)
  EXPECT_NABLA_ERROR(
      splitter.run_step(
          data.input, data.target,
          [&](const Tensor& x, const Tensor& y, double w) { return mlp_forward_backward(*model, x, y, w); }),
      "does not fit even as 8 micro-batches of one sample", "CPU out of memory", "set_cpu_memory_limit(0)");
  set_cpu_memory_limit(0);
  // 1 -> 2 -> 4 -> 8 micro-batches, then the error; each failed attempt zeroed the gradients.
  ASSERT_EQ(splitter.events().size(), 3u);
  EXPECT_EQ(splitter.events()[2].new_split, 8);
  EXPECT_EQ(splitter.split(), 8);
  EXPECT_EQ(zero_grad_calls, 4);
  EXPECT_EQ(cpu_memory_allocated(), before) << "a failed step must not leak";
  for (const auto& p : model->parameters()) EXPECT_FALSE(p.grad().defined());
  // The process stays usable: without the limit the same step runs, in 8 micro-batches.
  Tensor loss = splitter.run_step(data.input, data.target, [&](const Tensor& x, const Tensor& y, double w) {
    return mlp_forward_backward(*model, x, y, w);
  });
  auto reference = make_tiny_mlp(seed);
  EXPECT_NEAR(loss.item<float>(), mlp_forward_backward(*reference, data.input, data.target).item<float>(),
              1e-5);
}

TEST(OomSplit, OtherErrorsPassThroughWithoutSplitting) {
  MlpBatch data = random_mlp_batch(4, test_seed());
  OomSplitter splitter([] {});
  EXPECT_NABLA_ERROR(splitter.run_step(data.input, data.target,
                                       [](const Tensor& x, const Tensor&, double) -> Tensor {
                                         NABLA_CHECK(x.size(1) == 3,
                                                     "micro-step: expected 3 features, got {}", x.size(1));
                                         return x;
                                       }),
                     "expected 3 features, got 32");
  EXPECT_EQ(splitter.split(), 1);
  EXPECT_TRUE(splitter.events().empty());
}

TEST(OomSplit, RejectsMismatchedBatchesAndBadOptions) {
  OomSplitter splitter([] {});
  auto never = [](const Tensor& x, const Tensor&, double) { return x; };
  EXPECT_NABLA_ERROR(splitter.run_step(Tensor::empty({4, 2}), Tensor::empty({5}), never),
                     "same batch size (dim 0), got 4 and 5");
  EXPECT_NABLA_ERROR(OomSplitter([] {}, {.initial_split = 0}), "initial_split must be at least 1, got 0");
  EXPECT_NABLA_ERROR(OomSplitter(nullptr), "expected a zero_grad callback");
}

// On the GPU (skips without one): a real device out-of-memory, caused by a memory-fraction cap
// between what a half-batch and a full-batch step reserve, splits the step; the accumulated
// gradient equals the same model's unlimited full-batch gradient.
TEST(CudaOomSplit, ARealDeviceOutOfMemorySplitsTheStepAndKeepsTheGradient) {
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  if (cuda::allocator_backend() != "caching") GTEST_SKIP() << "native allocator: no memory fraction";
  const uint64_t seed = test_seed();
  const Device gpu = Device::cuda(0);
  constexpr int64_t kBatch = 65536;  // hidden activations of 128 MiB: far above segment rounding
  auto model = make_tiny_mlp(seed);
  model->to(gpu);
  MlpBatch cpu_data = random_mlp_batch(kBatch, seed);
  const Tensor input = cpu_data.input.to(gpu), target = cpu_data.target.to(gpu);
  // What a step reserves from the device, from an empty cache, for the full batch and for half.
  auto reserved_by_step = [&](int64_t rows) {
    model->zero_grad();
    cuda::empty_cache();
    cuda::reset_peak_memory_stats(0);
    mlp_forward_backward(*model, input.narrow(0, 0, rows), target.narrow(0, 0, rows));
    cuda::current_stream(0).synchronize();
    return cuda::max_memory_reserved(0);
  };
  const size_t half = reserved_by_step(kBatch / 2);
  const size_t full = reserved_by_step(kBatch);
  TensorList reference;  // the unlimited full-batch gradient, just computed
  for (const auto& p : model->parameters()) reference.push_back(p.grad().cpu());
  ASSERT_GT(full, half + 64 * (size_t{1} << 20)) << "full " << full << ", half " << half;

  model->zero_grad();
  cuda::empty_cache();
  struct FractionGuard {
    ~FractionGuard() { cuda::set_memory_fraction(1.0, 0); }
  } guard;
  // The device's total memory: under a fraction of 1 the snapshot's limit is exactly that.
  cuda::set_memory_fraction(1.0, 0);
  const auto device_total =
      nlohmann::json::parse(cuda::memory_snapshot(0))["memory_limit_bytes"].get<double>();
  cuda::set_memory_fraction(static_cast<double>((full + half) / 2) / device_total, 0);
  OomSplitter splitter([&] { model->zero_grad(); }, {.device = gpu});
  Tensor loss = splitter.run_step(input, target, [&](const Tensor& x, const Tensor& y, double w) {
    return mlp_forward_backward(*model, x, y, w);
  });
  cuda::set_memory_fraction(1.0, 0);
  ASSERT_FALSE(splitter.events().empty()) << "the cap did not cause an out-of-memory";
  EXPECT_GE(splitter.split(), 2);
  EXPECT_NE(splitter.events()[0].error.find("CUDA out of memory"), std::string::npos);
  TensorList grads;
  for (const auto& p : model->parameters()) grads.push_back(p.grad().cpu());
  expect_same_tensors(grads, reference, 1e-3, 1e-6);
}

}  // namespace
}  // namespace nabla::train_support
