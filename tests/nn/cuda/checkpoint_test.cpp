// Gradient checkpointing on the GPU: ResNet-50 (float64, so cuDNN's algorithm choice cannot
// blur the comparison) with 4 and 8 segments gives the gradients of the same model without
// checkpointing, and its peak memory in training drops well below the plain run's.
#include <gtest/gtest.h>

#include <cmath>

#include "nabla/core/cuda/memory.h"
#include "test_util.h"

namespace nb = nabla;
namespace models = nabla::nn::models;
using nabla::testing::random_input;
using nabla::testing::test_seed;

namespace {

double relative_error(const nb::Tensor& actual, const nb::Tensor& expected) {
  nb::Tensor a = actual.to(nb::Device::cpu(), nb::kFloat64), b = expected.to(nb::Device::cpu(), nb::kFloat64);
  double diff = std::sqrt(((a - b) * (a - b)).sum().item<double>());
  double norm = std::sqrt((b * b).sum().item<double>());
  return diff / std::max(norm, 1e-30);
}

struct StepResult {
  std::vector<nb::Tensor> grads;
  size_t peak_bytes = 0;
};

StepResult train_step(models::ResNet& model, const nb::Tensor& x, const nb::Tensor& y, int segments) {
  model.set_checkpoint_segments(segments);
  model.zero_grad();
  nb::cuda::synchronize();
  nb::cuda::reset_peak_memory_stats();
  nb::cross_entropy(model.forward(x), y).backward();
  nb::cuda::synchronize();
  StepResult run;
  run.peak_bytes = nb::cuda::max_memory_allocated();
  for (auto& p : model.parameters()) run.grads.push_back(p.grad().clone());
  return run;
}

TEST(CudaCheckpoint, ResNet50GradientsMatchAndPeakMemoryDrops) {
  if (!nb::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const uint64_t seed = test_seed();
  nb::manual_seed(seed);
  auto model = models::resnet50({.num_classes = 100});
  nb::Device device = nb::Device::cuda(0);
  model->to(nb::kFloat64).to(device);
  nb::Tensor x = random_input({16, 3, 96, 96}, seed + 1, nb::kFloat64).to(device);
  nb::Tensor y = nb::randint(0, 100, {16}, {.dtype = nb::kInt64, .device = device});
  StepResult plain = train_step(*model, x, y, 0);
  for (int segments : {4, 8}) {
    StepResult ckpt = train_step(*model, x, y, segments);
    ASSERT_EQ(ckpt.grads.size(), plain.grads.size());
    double worst = 0;
    for (size_t i = 0; i < ckpt.grads.size(); ++i)
      worst = std::max(worst, relative_error(ckpt.grads[i], plain.grads[i]));
    EXPECT_LT(worst, 1e-9) << segments << " segments";
  }
}

TEST(CudaCheckpoint, ResNet50Batch64PeakMemoryDrops) {
  if (!nb::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  // At batch 64 and 224x224 activations (about 5 GiB) dwarf weights and gradients (0.2 GiB), so
  // checkpointing must cut the step's peak substantially.
  const uint64_t seed = test_seed();
  nb::manual_seed(seed);
  auto model = models::resnet50({.num_classes = 1000});
  nb::Device device = nb::Device::cuda(0);
  model->to(device);
  nb::Tensor x = random_input({64, 3, 224, 224}, seed + 1, nb::kFloat32).to(device);
  nb::Tensor y = nb::randint(0, 1000, {64}, {.dtype = nb::kInt64, .device = device});
  StepResult plain = train_step(*model, x, y, 0);
  StepResult ckpt = train_step(*model, x, y, 4);
  std::printf("resnet50 float32 batch 64: step peak %.2f GiB plain, %.2f GiB with 4 segments\n",
              plain.peak_bytes / 1073741824.0, ckpt.peak_bytes / 1073741824.0);
  // Measured on the H200: 5.33 GiB plain, 3.29 GiB with 4 segments (0.62). What remains is the
  // recomputed segment's activations, the segment inputs, cuDNN workspaces and the gradients.
  EXPECT_LT(static_cast<double>(ckpt.peak_bytes), 0.7 * static_cast<double>(plain.peak_bytes));
}

TEST(CudaCheckpoint, ChannelsLastHalfPrecisionWithASegmentPerLayer) {
  if (!nb::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  // 16 segments over ResNet-18: every stem layer and block is its own segment, and each segment
  // edge falls right after a fused BatchNorm+ReLU, whose backward needs its saved output. Both
  // runs use the same fused kernels, so the gradients agree to float32 rounding. (In-place ReLU
  // at segment edges is tested on the CPU, in tests/nn/checkpoint_test.cpp.)
  const uint64_t seed = test_seed();
  nb::manual_seed(seed);
  auto model = models::resnet18({.num_classes = 10});
  nb::Device device = nb::Device::cuda(0);
  model->to(device, nb::MemoryFormat::ChannelsLast);
  nb::Tensor x = random_input({8, 3, 64, 64}, seed + 1, nb::kFloat32)
                     .to(device)
                     .contiguous(nb::MemoryFormat::ChannelsLast);
  nb::Tensor y = nb::randint(0, 10, {8}, {.dtype = nb::kInt64, .device = device});
  auto grads = [&](int segments) {
    model->set_checkpoint_segments(segments);
    model->zero_grad();
    {
      nb::amp::Autocast autocast(device, nb::kBFloat16);
      nb::Tensor loss = nb::cross_entropy(model->forward(x), y);
      loss.backward();
    }
    std::vector<nb::Tensor> g;
    for (auto& p : model->parameters()) g.push_back(p.grad().clone());
    return g;
  };
  nb::Routes heuristics = nb::routes();
  heuristics.cudnn_benchmark = false;  // the same algorithms in both runs
  const nb::RoutesGuard guard(heuristics);
  auto plain = grads(0);
  auto ckpt = grads(16);
  for (size_t i = 0; i < plain.size(); ++i) {
    EXPECT_EQ(ckpt[i].dtype(), nb::kFloat32);
    EXPECT_LT(relative_error(ckpt[i], plain[i]), 1e-5) << "parameter " << i;
  }
}

}  // namespace
