// End to end on the CPU: the small CNN trained under bfloat16 autocast reaches the accuracy of
// the same CNN trained in float32, from the same initial weights on the same batches.
//
// The synthetic task: 12x12 one-channel images of Gaussian noise; class k (of 4) adds a
// brighter 6x6 patch in quadrant k. Learnable, not trivial at this noise level, and cheap.
#include <gtest/gtest.h>

#include <vector>

#include "test_util.h"

namespace nabla::testing {
namespace {

constexpr int64_t kSize = 12, kClasses = 4;

struct Batch {
  Tensor images;  // (N, 1, 12, 12) float32
  Tensor labels;  // (N) int64
};

Batch make_batch(int64_t n, uint64_t seed) {
  Generator gen(seed);
  std::vector<float> noise = randn({n, 1, kSize, kSize}, {.dtype = kFloat32}, &gen).to_vector<float>();
  std::vector<int64_t> labels(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const int64_t k = (i * 7 + static_cast<int64_t>(seed % 5)) % kClasses;
    labels[static_cast<size_t>(i)] = k;
    const int64_t r0 = (k / 2) * 6, c0 = (k % 2) * 6;
    for (int64_t r = r0; r < r0 + 6; ++r) {
      for (int64_t c = c0; c < c0 + 6; ++c) noise[static_cast<size_t>((i * kSize + r) * kSize + c)] += 0.8f;
    }
  }
  return {tensor<float>(noise, {n, 1, kSize, kSize}), tensor<int64_t>(labels, {n})};
}

double accuracy(nn::models::SmallCnn& model, const Batch& data) {
  NoGradGuard no_grad;
  model.eval();
  const Tensor predicted = argmax(model.forward(data.images), 1);
  model.train();
  return eq(predicted, data.labels).to(kFloat64).mean().item<double>();
}

struct TrainResult {
  double accuracy;
  std::vector<double> losses;
};

TrainResult train(const nn::StateDict& init, bool bf16_autocast) {
  nn::models::SmallCnn model({.image_size = kSize, .num_classes = kClasses});
  model.load_state_dict(init);
  optim::SGD opt(model.parameters(), {.lr = 0.05, .momentum = 0.9});
  TrainResult run;
  for (int step = 0; step < 40; ++step) {
    const Batch batch = make_batch(32, 1000 + static_cast<uint64_t>(step));
    Tensor loss;
    {
      amp::Autocast autocast(Device::cpu(), kBFloat16, bf16_autocast);
      loss = cross_entropy(model.forward(batch.images), batch.labels);
    }
    EXPECT_EQ(loss.dtype(), kFloat32);
    opt.zero_grad();
    loss.backward();
    for (const Tensor& p : model.parameters()) EXPECT_EQ(p.grad().dtype(), kFloat32);
    opt.step();
    run.losses.push_back(loss.item<double>());
  }
  run.accuracy = accuracy(model, make_batch(256, 99));
  return run;
}

TEST(AmpTraining, SmallCnnUnderBFloat16AutocastMatchesFloat32Accuracy) {
  manual_seed(test_seed());
  nn::models::SmallCnn init({.image_size = kSize, .num_classes = kClasses});
  const nn::StateDict weights = init.state_dict();
  const TrainResult fp32 = train(weights, false);
  const TrainResult bf16 = train(weights, true);
  // Chance is 0.25; the float32 run learns the task, and bfloat16 lands within 3 points.
  EXPECT_GE(fp32.accuracy, 0.9);
  EXPECT_GE(bf16.accuracy, 0.9);
  EXPECT_NEAR(bf16.accuracy, fp32.accuracy, 0.03);
  // The loss curves agree early on (before rounding differences compound) and both fall.
  EXPECT_NEAR(bf16.losses[0], fp32.losses[0], 0.02 * fp32.losses[0]);
  EXPECT_LT(fp32.losses.back(), 0.5 * fp32.losses.front());
  EXPECT_LT(bf16.losses.back(), 0.5 * bf16.losses.front());
}

}  // namespace
}  // namespace nabla::testing
