// The step compiler's recorder reading held results through views (ops/fusion/recorder_pieces.cpp):
// slices computed for the slice, expands broadcast, a slice's gradient as pieces and sums of them
// piece by piece, and queries that run nothing. Each against the eager bits on fresh random inputs.
#include <random>

#include "fusion_test_util.h"
#include "nabla/core/memory_category.h"
#include "parity_util.h"

namespace nabla {
namespace {

using testing::eager_and_fused;
using testing::random_cuda;
using testing::same_bytes;

TEST(FusionScopeCuda, SlicesOfAHeldResultAreComputedForTheSliceWithoutRunningIt) {
  // Note [Slices of held results]: halves (and a same-layout alias) of a held chain, read by new
  // ops, are recorded again over each half instead of running the chain first.
  SKIP_WITHOUT_GPU();
  SKIP_WITHOUT_NVRTC();
  const uint64_t seed = std::random_device{}();
  const Tensor x = random_cuda({6, 3, 40}, kBFloat16, seed);
  const Tensor w = random_cuda({40}, kFloat32, seed + 1);
  const auto f = [&] {
    const Tensor v = exp(x.to(kFloat32) * w) - 1.0;
    const Tensor a = v.narrow(-1, 0, 16), b = v.narrow(-1, 16, 24), c = v.narrow(1, 1, 2);
    return TensorList{(a * 3.0).to(kBFloat16), b + 1.0, c * c, v.narrow(0, 0, 6) + 2.0};
  };
  const TensorList eager = f();
  TensorList fused;
  {
    FusionScope scope(true);
    const FusionStats before = scope.stats();
    fused = f();
    EXPECT_EQ(scope.stats().flushes, before.flushes) << "a slice's read ran the held chain";
  }
  for (size_t i = 0; i < eager.size(); ++i) EXPECT_TRUE(same_bytes(eager[i], fused[i])) << "result " << i;
}

TEST(FusionScopeCuda, AnExpandOfAHeldResultIsReadWithoutRunningIt) {
  // A mean's backward expands its held gradient; RMSNorm's backward reads it that way (Note
  // [Slices of held results], push_down_expand).
  SKIP_WITHOUT_GPU();
  SKIP_WITHOUT_NVRTC();
  const uint64_t seed = std::random_device{}();
  const Tensor x = random_cuda({8, 16, 32}, kFloat32, seed);
  const auto f = [&] {
    const Tensor r = rsqrt(mean(x * x, {-1}, true) + 1e-5);
    const Tensor e = r.expand({8, 16, 32});
    return TensorList{e * x + 1.0, (r * 0.5).expand({8, 16, 32}) - x, e, r};  // e and r held at the flush
  };
  const TensorList eager = f();
  TensorList fused;
  {
    FusionScope scope(true);
    const FusionStats before = scope.stats();
    fused = f();
    EXPECT_EQ(scope.stats().flushes, before.flushes) << "reading the expand ran the held ops";
  }
  for (size_t i = 0; i < eager.size(); ++i) EXPECT_TRUE(same_bytes(eager[i], fused[i])) << "result " << i;
}

TEST(FusionScopeCuda, ExpandsBroadcastEverywhereOrSummedHaveTheEagerBits) {
  // An expand of a one-element result (every dim broadcast), held at the flush, read by a
  // pointwise op and by a sum: the copy of an expand is never stored, four-wide or not.
  SKIP_WITHOUT_GPU();
  SKIP_WITHOUT_NVRTC();
  const uint64_t seed = std::random_device{}();
  const Tensor x = random_cuda({4, 64}, kFloat32, seed);
  const Tensor one = random_cuda({1, 1}, kFloat32, seed + 1);
  auto [eager, fused, stats] = eager_and_fused([&] {
    const Tensor w = exp(one * 0.5);
    const Tensor t = w.expand({4, 64});
    return TensorList{w, t * x, sum(t * x, {-1}), (t + 1.0) * x.unsqueeze(0).expand({2, 4, 64})};
  });
  EXPECT_EQ(stats.fallbacks, 0);
  for (size_t i = 0; i < eager.size(); ++i) EXPECT_TRUE(same_bytes(eager[i], fused[i])) << "result " << i;
}

TEST(FusionScopeCuda, SumsOfSlicesOfAHeldResultHaveTheEagerBits) {
  // A slice read pointwise becomes a held result at its own offset (Note [Slices of held
  // results]); a sum of it must split its elements as the eager fold does, aligned or not.
  SKIP_WITHOUT_GPU();
  SKIP_WITHOUT_NVRTC();
  const uint64_t seed = std::random_device{}();
  const Tensor x = random_cuda({37, 301}, kFloat32, seed);
  auto [eager, fused, stats] = eager_and_fused([&] {
    const Tensor h = exp(x * 0.5);
    TensorList out;
    for (int64_t start : {0, 1, 3, 8}) {
      const Tensor a = h.narrow(0, start, 20);
      out.push_back(a * 2.0);
      out.push_back(a.sum());
      out.push_back(a.sum({1}));
    }
    return out;
  });
  EXPECT_EQ(stats.fallbacks, 0);
  for (size_t i = 0; i < eager.size(); ++i) EXPECT_TRUE(same_bytes(eager[i], fused[i])) << "result " << i;
}

TEST(FusionScopeCuda, ARotaryEmbeddingsBackwardIsHeldWholeWithTheEagerBits) {
  // Rotary embedding from halves and cat, as the plain LLaMA writes it: its backward reads the
  // cast gradient through halves (Note [Slices of held results]) and sums the halves' padded
  // gradients (Note [Padded slices]), with nothing run until the gradient is read.
  SKIP_WITHOUT_GPU();
  SKIP_WITHOUT_NVRTC();
  const uint64_t seed = std::random_device{}();
  const Tensor x0 = random_cuda({2, 16, 3, 8}, kBFloat16, seed);
  const Tensor angles = random_cuda({16, 4}, kFloat32, seed + 1);
  const Tensor cos = nabla::cos(angles), sin = nabla::sin(angles);
  const Tensor dy = random_cuda({2, 3, 16, 8}, kBFloat16, seed + 2);
  const auto f = [&](FusionScope* scope) {
    const Tensor x = x0.detach().requires_grad_(true);
    const Tensor q = x.transpose(1, 2);  // heads first, as after a projection's view
    const Tensor a = q.narrow(-1, 0, 4), b = q.narrow(-1, 4, 4);
    const Tensor y = cat({a * cos - b * sin, b * cos + a * sin}, -1).to(kBFloat16);
    int flushes = 0;
    if (scope != nullptr) {
      scope->flush();
      flushes = scope->stats().flushes;
    }
    y.backward(dy);
    if (scope != nullptr) {
      EXPECT_LE(scope->stats().flushes, flushes + 1) << "only reading the gradient runs the held backward";
    }
    return TensorList{y.detach(), x.grad()};
  };
  const TensorList eager = f(nullptr);
  TensorList fused;
  {
    FusionScope scope(true);
    fused = f(&scope);
  }
  for (size_t i = 0; i < eager.size(); ++i) EXPECT_TRUE(same_bytes(eager[i], fused[i])) << "result " << i;
  EXPECT_EQ(fused[1].strides(), eager[1].strides());
}

TEST(FusionScopeCuda, AskingForMemoryStatisticsRunsNothingHeld) {
  // NABLA_SAVED_REPORT asks after every backward node: a flush there would cut the regions it
  // reports on into pieces.
  SKIP_WITHOUT_GPU();
  SKIP_WITHOUT_NVRTC();
  const Tensor x = random_cuda({64, 96}, kFloat32, std::random_device{}());
  Tensor y;
  {
    FusionScope scope(true);
    const Tensor a = x * 3.0;
    const FusionStats before = scope.stats();
    const size_t in_use = memory_category_stats(x.device()).total;
    EXPECT_GT(in_use, 0u);
    EXPECT_EQ(scope.stats().flushes, before.flushes) << "the query ran the held ops";
    y = exp(a);
  }
  EXPECT_TRUE(same_bytes(y, exp(x * 3.0)));
}

}  // namespace
}  // namespace nabla
