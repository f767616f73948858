// The step compiler inside nn::make_graphed_step (fuse = true, the default): a LLaMA-style block
// written plainly (RMSNorm from pointwise ops and a mean, a SwiGLU MLP, residual adds) trained
// with AdamW and gradient clipping under bfloat16 autocast gives, step after step, the very bits
// of the same graphed step with fusion off: fused kernels compute what the eager kernels do.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <random>

#include "test_util.h"

namespace nabla::testing {
namespace {

// RMSNorm as a user writes it: x * rsqrt(mean(x^2) + eps) * weight.
struct RmsNorm : nn::Module {
  Tensor weight;
  explicit RmsNorm(int64_t dim) : weight(ones({dim})) { register_parameter("weight", weight); }
  Tensor forward(const Tensor& x) override {
    Tensor x32 = x.to(kFloat32);
    Tensor rstd = rsqrt(mean(x32 * x32, {-1}, true) + 1e-6);
    return (x32 * rstd).to(x.dtype()) * weight;
  }
};

struct Block : nn::Module {
  RmsNorm norm;
  nn::Linear gate, up, down;
  explicit Block(int64_t dim, int64_t hidden)
      : norm(dim),
        gate({.in = dim, .out = hidden, .bias = false}),
        up({.in = dim, .out = hidden, .bias = false}),
        down({.in = hidden, .out = dim, .bias = false}) {
    register_modules({{"norm", norm}, {"gate", gate}, {"up", up}, {"down", down}});
  }
  Tensor forward(const Tensor& x) override {
    Tensor h = norm(x);
    return x + down(silu(gate(h)) * up(h));
  }
};

struct TrainRun {
  std::shared_ptr<Block> model;
  std::unique_ptr<optim::AdamW> opt;
  explicit TrainRun(uint64_t seed) {
    manual_seed(seed);
    model = std::make_shared<Block>(64, 160);
    model->to(Device::cuda());
    opt = std::make_unique<optim::AdamW>(model->parameters(), optim::AdamWOptions{.lr = 1e-2});
  }
  Tensor step(const Tensor& x, const Tensor& target) {
    opt->zero_grad();
    Tensor loss;
    {
      amp::Autocast autocast(Device::cuda(), kBFloat16);
      Tensor y = model->forward(x);
      Tensor d = y.to(kFloat32) - target;
      loss = mean(d * d);
    }
    loss.backward();
    optim::clip_grad_norm_(model->parameters(), 1.0);
    opt->step();
    return loss;
  }
};

bool same_bytes(const Tensor& a, const Tensor& b) {
  const Tensor ca = a.cpu().contiguous(), cb = b.cpu().contiguous();
  return ca.nbytes() == cb.nbytes() && std::memcmp(ca.data_ptr(), cb.data_ptr(), ca.nbytes()) == 0;
}

TEST(FusedStepCuda, APlainBlockTrainsToTheUnfusedStepsBits) {
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const uint64_t seed = std::random_device{}();
  TrainRun plain(seed), fused(seed);
  auto plain_step = nn::make_graphed_step([&](const Tensor& x, const Tensor& t) { return plain.step(x, t); },
                                          {.warmup = 2, .fuse = false});
  auto fused_step = nn::make_graphed_step([&](const Tensor& x, const Tensor& t) { return fused.step(x, t); },
                                          {.warmup = 2, .fuse = true});
  for (int s = 0; s < 6; ++s) {
    const Tensor x = random_input({8, 32, 64}, seed + 10 * s, kFloat32).to(Device::cuda());
    const Tensor t = random_input({8, 32, 64}, seed + 10 * s + 1, kFloat32).to(Device::cuda());
    const Tensor a = plain_step(x, t).clone(), b = fused_step(x, t).clone();
    EXPECT_TRUE(same_bytes(a, b)) << "step " << s << ": loss " << a.item<double>() << " fused "
                                  << b.item<double>() << " (seed " << seed << ")";
  }
  EXPECT_TRUE(fused_step.graphed()) << fused_step.eager_reason();
  const FusionStats& warm = fused_step.warmup_fusion();
  const FusionStats& captured = fused_step.capture_fusion();
  EXPECT_GT(warm.fused_kernels, 0);
  EXPECT_EQ(warm.fallbacks, 0);
  EXPECT_GT(warm.recomputed_values, 0) << "RMSNorm's and SwiGLU's saved products are computed again";
  EXPECT_EQ(captured.fused_kernels, warm.fused_kernels) << "the capture fused what the warm-up did";
  EXPECT_EQ(captured.compiled + captured.from_disk, 0) << "the capture loaded kernels";
  EXPECT_EQ(plain_step.capture_fusion().recorded_ops, 0);
  const auto pa = plain.model->named_parameters(), pb = fused.model->named_parameters();
  for (size_t i = 0; i < pa.size(); ++i) EXPECT_TRUE(same_bytes(pa[i].second, pb[i].second)) << pa[i].first;
}

}  // namespace
}  // namespace nabla::testing
