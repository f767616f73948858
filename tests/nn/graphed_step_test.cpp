// nn::make_graphed_step where no graph can apply: CPU inputs run eagerly, every call, with
// the step's own results and a reason that names the input; bad options fail clearly. The
// capture itself is tested on the GPU (tests/nn/cuda/graphed_step_test.cpp).
#include <gtest/gtest.h>

#include "nabla/core/dispatch.h"
#include "test_util.h"

namespace nabla::testing {
namespace {

TEST(GraphedStep, CpuInputsRunEagerlyEveryCallAndSayWhy) {
  const uint64_t seed = test_seed();
  Tensor w = random_input({5, 3}, seed, kFloat64, true);
  optim::SGD opt({w}, {.lr = 0.1, .momentum = 0.9});
  auto body = [&](const Tensor& x, const Tensor& y) {
    opt.zero_grad();
    Tensor loss = mean(pow(sub(matmul(x, w), y), 2.0));
    loss.backward();
    opt.step();
    return loss;
  };
  Tensor w_ref = w.detach().clone().requires_grad_(true);
  optim::SGD opt_ref({w_ref}, {.lr = 0.1, .momentum = 0.9});
  auto step = nn::make_graphed_step(body, {.warmup = 1});
  for (int s = 0; s < 4; ++s) {
    Tensor x = random_input({7, 5}, seed + 1 + s), y = random_input({7, 3}, seed + 11 + s);
    Tensor got = step(x, y);
    opt_ref.zero_grad();
    Tensor want = mean(pow(sub(matmul(x, w_ref), y), 2.0));
    want.backward();
    opt_ref.step();
    EXPECT_TRUE(all_close(got, want, 1e-12, 0.0)) << "step " << s;
  }
  EXPECT_TRUE(all_close(w, w_ref, 1e-12, 0.0));
  EXPECT_FALSE(step.graphed());
  EXPECT_EQ(step.eager_calls(), 4);
  EXPECT_EQ(step.replays(), 0);
  EXPECT_FALSE(step.eager_reason().empty());
  if (kHasCuda)
    EXPECT_NE(step.eager_reason().find("input 0 is on cpu"), std::string::npos) << step.eager_reason();
}

TEST(GraphedStep, DisabledStepsSayTheyAreOff) {
  int calls = 0;
  auto step = nn::make_graphed_step(
      [&](const TensorList& in) {
        ++calls;
        return in.at(0);
      },
      {.enabled = false});
  Tensor x = random_input({2}, test_seed());
  EXPECT_TRUE(step(TensorList{x}).is_same(x));
  EXPECT_EQ(calls, 1);
  EXPECT_NE(step.eager_reason().find("off"), std::string::npos);
}

TEST(GraphedStep, BadOptionsAreRefused) {
  EXPECT_NABLA_ERROR(nn::make_graphed_step([](const Tensor& x) { return x; }, {.warmup = 0}), "warmup",
                     "at least 1");
  EXPECT_NABLA_ERROR(nn::GraphedStep{nn::StepFunction{}}, "step function is empty");
}

}  // namespace
}  // namespace nabla::testing
