// Saved values computed again in the backward (Note [Recomputed saved values] in
// ops/fusion/recompute.cpp), on the GPU: a norm and a gated activation run forward and backward in
// a FusionScope give the eager gradients bit for bit, while the forward keeps less memory for the
// backward; a leaf written in place between them does not change a gradient.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "nabla/core/cuda/memory.h"
#include "nabla/nabla.h"
#include "nabla/ops/fusion.h"
#include "test_util.h"

namespace nabla {
namespace {

bool same_bytes(const Tensor& a, const Tensor& b) {
  const Tensor ca = a.cpu().contiguous(), cb = b.cpu().contiguous();
  return ca.nbytes() == cb.nbytes() && std::memcmp(ca.data_ptr(), cb.data_ptr(), ca.nbytes()) == 0;
}

// RMSNorm of a bf16 x in float32, scaled, then y * silu(y): every saved value but x, the
// statistic and w is pointwise.
Tensor norm_gate(const Tensor& x, const Tensor& w) {
  const Tensor xf = x.to(kFloat32);
  const Tensor n = xf * rsqrt(mean(xf * xf, {-1}, true) + 1e-5);
  const Tensor y = n * w;
  return silu(y) * y;
}

struct Pass {
  Tensor x, w, out;
  size_t kept_bytes = 0;  // allocated after the forward, beyond the inputs
  FusionStats stats;
};

Pass forward_backward(uint64_t seed, bool fuse, bool write_x_in_place) {
  Pass run;
  run.x = testing::random_input({16, 128, 512}, seed, kBFloat16).to(Device::cuda());
  run.w = testing::random_input({512}, seed + 1, kFloat32).to(Device::cuda()).requires_grad_(true);
  if (!write_x_in_place) run.x.requires_grad_(true);
  cuda::synchronize();
  const size_t before = cuda::memory_allocated();
  FusionScope scope(fuse);
  run.out = norm_gate(run.x, run.w);
  scope.flush();
  run.kept_bytes = cuda::memory_allocated() - before;
  if (write_x_in_place) run.x.mul_(3.0);  // after the forward saved what it reads
  run.out.sum().backward();
  scope.flush();
  run.stats = scope.stats();
  return run;
}

TEST(FusionRecomputeCuda, SavedPointwiseValuesAreComputedAgainWithTheEagerGradients) {
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const uint64_t seed = std::random_device{}();
  const Pass eager = forward_backward(seed, false, false);
  const Pass fused = forward_backward(seed, true, false);
  if (fused.stats.recorded_ops == 0) GTEST_SKIP() << "the step compiler is off (NABLA_FUSION)";
  EXPECT_GT(fused.stats.recomputed_values, 0);
  EXPECT_TRUE(same_bytes(fused.out, eager.out)) << "seed " << seed;
  EXPECT_TRUE(same_bytes(fused.x.grad(), eager.x.grad())) << "seed " << seed;
  EXPECT_TRUE(same_bytes(fused.w.grad(), eager.w.grad())) << "seed " << seed;
  // Eager mode keeps x in float32, x * rstd, y and silu(y) (float32, each as large as x) for the
  // backward; the fused forward keeps x, rstd and w, and computes the four again.
  const size_t value = static_cast<size_t>(eager.x.numel()) * 4;
  EXPECT_LE(fused.kept_bytes + 3 * value, eager.kept_bytes + value / 8)
      << "fused forward kept " << fused.kept_bytes << " bytes, eager " << eager.kept_bytes;
}

TEST(FusionRecomputeCuda, ALeafWrittenInPlaceBeforeTheBackwardChangesNoGradient) {
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const uint64_t seed = std::random_device{}();
  const Pass eager = forward_backward(seed, false, true);
  const Pass fused = forward_backward(seed, true, true);
  if (fused.stats.recorded_ops == 0) GTEST_SKIP() << "the step compiler is off (NABLA_FUSION)";
  EXPECT_GT(fused.stats.recomputed_values, 0);
  EXPECT_TRUE(same_bytes(fused.w.grad(), eager.w.grad())) << "seed " << seed;
}

TEST(FusionRecomputeCuda, AMatmulsGatedInputIsComputedAgainFromWhatTheGateKept) {
  // SwiGLU: the down projection saves silu(g) * u, written for the matmul, after the flush that
  // wrote it; it is kept as its recipe over g and u (saved by silu and mul anyway).
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const uint64_t seed = std::random_device{}();
  struct Result {
    std::vector<Tensor> grads;
    size_t kept_bytes = 0;
    FusionStats stats;
  };
  const auto pass = [&](bool fuse, bool two_readers) {
    const auto param = [&](Shape sizes, uint64_t s) {
      return testing::random_input(sizes, seed + s, kBFloat16).to(Device::cuda()).requires_grad_(true);
    };
    Tensor x = param({2048, 256}, 0), w1 = param({1024, 256}, 1), w3 = param({1024, 256}, 2),
           w2 = param({256, 1024}, 3), w4 = param({256, 1024}, 4);
    cuda::synchronize();
    const size_t before = cuda::memory_allocated();
    FusionScope scope(fuse);
    Tensor y;
    {
      const Tensor g = matmul(x, w1.t()), u = matmul(x, w3.t());
      const Tensor h = silu(g) * u;
      y = matmul(h, w2.t());
      if (two_readers) y = y + matmul(h, w4.t());
    }
    scope.flush();
    Result r;
    r.kept_bytes = cuda::memory_allocated() - before;
    y.to(kFloat32).sum().backward();
    scope.flush();
    r.stats = scope.stats();
    r.grads = {x.grad(), w1.grad(), w2.grad(), w3.grad()};
    if (two_readers) r.grads.push_back(w4.grad());
    return r;
  };
  const Result eager = pass(false, false);
  const Result fused = pass(true, false);
  if (fused.stats.recorded_ops == 0) GTEST_SKIP() << "the step compiler is off (NABLA_FUSION)";
  for (size_t i = 0; i < eager.grads.size(); ++i) {
    EXPECT_TRUE(same_bytes(fused.grads[i], eager.grads[i])) << "gradient " << i << ", seed " << seed;
  }
  // Eager mode keeps silu(g) and the product beside g and u; the fused forward keeps g and u.
  const size_t value = size_t{2048} * 1024 * 2;
  EXPECT_LE(fused.kept_bytes + 2 * value, eager.kept_bytes + value / 8)
      << "fused forward kept " << fused.kept_bytes << " bytes, eager " << eager.kept_bytes;

  // Saved by two projections, the product is kept once rather than computed again for each.
  const Result eager2 = pass(false, true);
  const Result fused2 = pass(true, true);
  for (size_t i = 0; i < eager2.grads.size(); ++i) {
    EXPECT_TRUE(same_bytes(fused2.grads[i], eager2.grads[i])) << "gradient " << i << ", seed " << seed;
  }
  EXPECT_LE(fused2.kept_bytes + value, eager2.kept_bytes + value / 8);
  EXPECT_GT(fused2.kept_bytes + 2 * value, eager2.kept_bytes + value / 8) << "the product is kept";
}

}  // namespace
}  // namespace nabla
