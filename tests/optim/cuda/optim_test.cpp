// Optimizers, clipping and the EMA on CUDA against the same steps on the CPU. SGD and Adam(W)
// take the fused multi-tensor kernel for float32 tensors (more than one launch batch here:
// 40 tensors, some large), float64 tensors in the same group take the per-tensor path, and
// LARS and the EMA run ordinary ops on the device; the global L2 norm for clipping is one
// multi-tensor reduction.
#include <gtest/gtest.h>

#include <functional>
#include <memory>

#include "test_util.h"

namespace nabla::testing {
namespace {

using MakeOptimizer = std::function<std::unique_ptr<optim::Optimizer>(TensorList)>;

struct Twin {
  TensorList cpu, gpu;
};

// `count` parameters of varied sizes (one large); parameter 1 is float64 when mixed.
Twin make_params(uint64_t seed, int count, bool mixed) {
  Twin t;
  for (int i = 0; i < count; ++i) {
    const Shape shape = i == 0 ? Shape{300, 257} : i == 3 ? Shape{2, 3, 4, 5} : Shape{i + 1, 3};
    const DType dtype = mixed && i == 1 ? kFloat64 : kFloat32;
    // Parameter 3 is channels_last (with channels_last gradients): fused in that layout.
    const auto format = i == 3 ? MemoryFormat::ChannelsLast : MemoryFormat::Contiguous;
    Tensor p = random_input(shape, seed + i, dtype);
    // detach(): new leaves, never p itself (contiguous() may return p), so p never requires grad.
    Tensor cpu = p.contiguous(format).detach();
    Tensor gpu = p.to(Device::cuda()).contiguous(format).detach();
    t.cpu.push_back(cpu.requires_grad_(true));
    t.gpu.push_back(gpu.requires_grad_(true));
  }
  return t;
}

void set_grads(const Twin& t, uint64_t seed, int step) {
  for (size_t i = 0; i < t.cpu.size(); ++i) {
    if (i == 2 && step == 1) {  // a parameter without a gradient for one step
      t.cpu[i].set_grad(Tensor());
      t.gpu[i].set_grad(Tensor());
      continue;
    }
    const auto format = i == 3 ? MemoryFormat::ChannelsLast : MemoryFormat::Contiguous;
    Tensor g = random_input(t.cpu[i].sizes(), seed + 7919 * (step + 1) + i, t.cpu[i].dtype());
    t.cpu[i].set_grad(g.contiguous(format));
    t.gpu[i].set_grad(g.to(Device::cuda()).contiguous(format));
  }
}

void expect_same(const TensorList& gpu, const TensorList& cpu, double rtol, double atol) {
  for (size_t i = 0; i < cpu.size(); ++i) {
    EXPECT_TRUE(all_close(gpu[i].detach().cpu(), cpu[i].detach(), rtol, atol)) << "param " << i;
  }
}

void check_parity(const MakeOptimizer& make, uint64_t seed, double rtol = 2e-5, double atol = 2e-6) {
  auto t = make_params(seed, 40, true);
  auto on_cpu = make(t.cpu);
  auto on_gpu = make(t.gpu);
  for (int s = 0; s < 5; ++s) {
    set_grads(t, seed, s);
    on_cpu->step();
    on_gpu->step();
  }
  expect_same(t.gpu, t.cpu, rtol, atol);
  // The state matches too, and moves across devices: continue the GPU run on a CPU optimizer.
  auto resumed = make(t.cpu);
  resumed->load_state_dict(on_gpu->state_dict());
  for (size_t i = 0; i < t.cpu.size(); ++i) {
    NoGradGuard no_grad;
    t.cpu[i].copy_(t.gpu[i].detach().cpu());
  }
  set_grads(t, seed, 5);
  resumed->step();
  on_gpu->step();
  expect_same(t.gpu, t.cpu, rtol, atol);
}

TEST(CudaOptim, SgdMatchesCpu) {
  if (!nabla::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  check_parity(
      [](TensorList p) {
        return std::make_unique<optim::SGD>(
            p, optim::SgdOptions{.lr = 0.05, .momentum = 0.9, .dampening = 0.2, .weight_decay = 0.01});
      },
      test_seed());
  check_parity(
      [](TensorList p) {
        return std::make_unique<optim::SGD>(
            p, optim::SgdOptions{.lr = 0.05, .momentum = 0.9, .weight_decay = 1e-3, .nesterov = true});
      },
      test_seed() + 1);
  check_parity([](TensorList p) { return std::make_unique<optim::SGD>(p, optim::SgdOptions{.lr = 0.1}); },
               test_seed() + 2);
}

TEST(CudaOptim, AdamMatchesCpu) {
  if (!nabla::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  check_parity(
      [](TensorList p) {
        return std::make_unique<optim::Adam>(p, optim::AdamOptions{.lr = 0.01, .weight_decay = 0.05});
      },
      test_seed());
  check_parity(
      [](TensorList p) {
        return std::make_unique<optim::Adam>(p, optim::AdamOptions{.lr = 0.01, .amsgrad = true});
      },
      test_seed() + 1);
}

TEST(CudaOptim, AdamWMatchesCpu) {
  if (!nabla::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  check_parity(
      [](TensorList p) {
        return std::make_unique<optim::AdamW>(
            p, optim::AdamWOptions{.lr = 0.01, .weight_decay = 0.1, .amsgrad = true});
      },
      test_seed());
}

TEST(CudaOptim, LarsMatchesCpu) {
  if (!nabla::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  check_parity(
      [](TensorList p) {
        std::vector<optim::ParamGroup> groups(2);
        for (size_t i = 0; i < p.size(); ++i) groups[i % 2].params.push_back(p[i]);
        groups[1].skip_adaptation = true;
        return std::make_unique<optim::LARS>(
            groups, optim::LarsOptions{.lr = 0.5, .weight_decay = 0.01, .eta = 0.02});
      },
      test_seed(), 1e-4, 1e-5);
}

TEST(CudaOptim, FusedStepBumpsVersions) {
  if (!nabla::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  auto t = make_params(test_seed(), 3, false);
  optim::SGD opt(t.gpu, {.lr = 0.1, .momentum = 0.9});
  set_grads(t, test_seed(), 0);
  const auto version = t.gpu[0].version();
  opt.step();
  EXPECT_GT(t.gpu[0].version(), version);
}

TEST(CudaOptim, ClipGradNormMatchesCpu) {
  if (!nabla::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  for (double p : {2.0, 1.0, optim::kInfNorm}) {
    // 130 gradients: two batches of the fused L2 reduction; one float64 gradient takes the
    // per-tensor path.
    auto t = make_params(test_seed(), 130, true);
    set_grads(t, test_seed(), 0);
    Tensor cpu_norm = optim::clip_grad_norm_(t.cpu, 0.5, p);
    Tensor gpu_norm = optim::clip_grad_norm_(t.gpu, 0.5, p);
    EXPECT_TRUE(gpu_norm.is_cuda());
    EXPECT_TRUE(all_close(gpu_norm.cpu(), cpu_norm, 1e-5)) << "norm_type " << p;
    for (size_t i = 0; i < t.cpu.size(); ++i) {
      EXPECT_TRUE(all_close(t.gpu[i].grad().cpu(), t.cpu[i].grad(), 1e-5, 1e-7)) << "norm_type " << p;
    }
  }
}

TEST(CudaOptim, EmaMatchesCpu) {
  if (!nabla::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  auto t = make_params(test_seed(), 4, false);
  optim::ExponentialMovingAverage cpu_ema(t.cpu, {.decay = 0.9});
  optim::ExponentialMovingAverage gpu_ema(t.gpu, {.decay = 0.9});
  for (int s = 0; s < 3; ++s) {
    set_grads(t, test_seed(), s);
    optim::SGD(t.cpu, {.lr = 0.1}).step();
    optim::SGD(t.gpu, {.lr = 0.1}).step();
    cpu_ema.update();
    gpu_ema.update();
  }
  gpu_ema.store();
  gpu_ema.copy_to();
  cpu_ema.store();
  cpu_ema.copy_to();
  expect_same(t.gpu, t.cpu, 1e-5, 1e-6);
  gpu_ema.restore();
  cpu_ema.restore();
  expect_same(t.gpu, t.cpu, 1e-5, 1e-6);
}

}  // namespace
}  // namespace nabla::testing
