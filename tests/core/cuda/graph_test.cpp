// CUDA graph capture of an MLP training step (forward, backward, no optimizer) with temporary
// allocations from the allocator's private pool, replayed on new data and compared with eager
// execution of the same step on the CPU.
#include "nabla/core/cuda/graph.h"
#include "nabla/core/cuda/memory.h"
#include "test_util.h"

namespace nabla {
namespace {

using testing::all_close;
using testing::random_input;
using testing::test_seed;

struct Mlp {
  Tensor w1, b1, w2, b2;
  TensorList params() const { return {w1, b1, w2, b2}; }
};

Mlp make_mlp(Device device, uint64_t seed) {
  auto p = [&](const Shape& s, uint64_t k) {
    return (random_input(s, seed + k, kFloat32) * 0.3).to(device).requires_grad_();
  };
  return {p({16, 32}, 1), p({32}, 2), p({32, 4}, 3), p({4}, 4)};
}

// loss = mean((relu(x W1 + b1) W2 + b2 - y)^2); returns the loss.
Tensor step(const Mlp& m, const Tensor& x, const Tensor& y) {
  Tensor h = relu(matmul(x, m.w1) + m.b1);
  Tensor out = matmul(h, m.w2) + m.b2;
  Tensor diff = out - y;
  Tensor loss = (diff * diff).mean();
  loss.backward();
  return loss;
}

TEST(CudaGraph, ACapturedTrainingStepReplaysWithCorrectGradientsOnNewData) {
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  uint64_t seed = test_seed();
  Mlp gpu = make_mlp(Device::cuda(), seed);
  Tensor x = zeros({8, 16}, {.device = Device::cuda()});
  Tensor y = zeros({8, 4}, {.device = Device::cuda()});

  // Warm up on a side stream (lazy initialisation, handles, workspaces happen outside capture).
  cuda::Stream side = cuda::stream_from_pool();
  cuda::Graph graph;
  Tensor loss;
  {
    cuda::StreamGuard guard(side);
    x.copy_(random_input({8, 16}, seed + 10, kFloat32).to(Device::cuda()));
    step(gpu, x, y);
    for (auto& p : gpu.params()) p.set_grad(Tensor());
    side.synchronize();
    size_t device_allocs = cuda::allocator_counts().device_allocations;
    graph.capture_begin();
    loss = step(gpu, x, y);
    graph.capture_end();
    EXPECT_TRUE(graph.captured());
    (void)device_allocs;
  }

  for (int round = 0; round < 3; ++round) {
    Tensor xs = random_input({8, 16}, seed + 100 + round, kFloat32);
    Tensor ys = random_input({8, 4}, seed + 200 + round, kFloat32);
    {
      cuda::StreamGuard guard(side);
      x.copy_(xs.to(Device::cuda()));
      y.copy_(ys.to(Device::cuda()));
      graph.replay();
      side.synchronize();
    }
    // Eager reference on the CPU with the same weights.
    Mlp cpu{gpu.w1.detach().cpu().requires_grad_(), gpu.b1.detach().cpu().requires_grad_(),
            gpu.w2.detach().cpu().requires_grad_(), gpu.b2.detach().cpu().requires_grad_()};
    Tensor ref_loss = step(cpu, xs, ys);
    EXPECT_TRUE(all_close(loss.cpu(), ref_loss, 1e-4, 1e-6)) << "round " << round;
    for (size_t i = 0; i < 4; ++i) {
      EXPECT_TRUE(all_close(gpu.params()[i].grad().cpu(), cpu.params()[i].grad(), 1e-4, 1e-6))
          << "round " << round << " param " << i;
    }
  }
  graph.reset();
}

}  // namespace
}  // namespace nabla
