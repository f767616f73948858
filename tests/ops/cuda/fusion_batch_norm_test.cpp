// A training batch norm and the ReLU after it, folded by the step compiler (Note [Batch norm and
// its ReLU] in ops/fusion/recorder_held.cpp), on the GPU: relu(bn(x)) read by a convolution, run
// forward and backward in a FusionScope, gives eager mode's output, running statistics and
// gradients, while the batch norm's kernels take in the ReLU's forward and its backward; an
// output someone else still reads is written and nothing is folded.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "nabla/nabla.h"
#include "nabla/ops/fusion.h"
#include "test_util.h"

namespace nabla {
namespace {

bool same_bytes(const Tensor& a, const Tensor& b) {
  const Tensor ca = a.cpu().contiguous(), cb = b.cpu().contiguous();
  return ca.nbytes() == cb.nbytes() && std::memcmp(ca.data_ptr(), cb.data_ptr(), ca.nbytes()) == 0;
}

struct Pass {
  Tensor x, weight, bias, running_mean, running_var, conv_weight, residual;
  Tensor relu_out, kept_bn_out;
  FusionStats stats;
};

// conv2d(relu(bn(x)), w).sum() forward and backward, the ReLU in place (relu_) or not, or of
// bn(x) + z (add); with keep_bn_out, bn(x) is also held by the caller until after the backward.
Pass forward_backward(uint64_t seed, DType dtype, bool channels_last, bool fuse, bool keep_bn_out,
                      bool in_place = false, bool add = false) {
  constexpr int64_t kC = 32;
  Pass p;
  const Device gpu = Device::cuda();
  p.x = testing::random_input({8, kC, 12, 12}, seed, dtype).to(gpu);
  if (channels_last) p.x = p.x.contiguous(MemoryFormat::ChannelsLast);
  p.x.requires_grad_(true);
  p.weight = testing::random_input({kC}, seed + 1, kFloat32).to(gpu).requires_grad_(true);
  p.bias = testing::random_input({kC}, seed + 2, kFloat32).to(gpu).requires_grad_(true);
  p.running_mean = testing::random_input({kC}, seed + 3, kFloat32).to(gpu);
  p.running_var = testing::random_input({kC}, seed + 4, kFloat32).abs().to(gpu);
  p.conv_weight = testing::random_input({16, kC, 1, 1}, seed + 5, dtype).to(gpu);
  if (channels_last) p.conv_weight = p.conv_weight.contiguous(MemoryFormat::ChannelsLast);
  p.conv_weight.requires_grad_(true);
  p.residual = testing::random_input(p.x.sizes(), seed + 6, dtype).to(gpu);
  if (channels_last) p.residual = p.residual.contiguous(MemoryFormat::ChannelsLast);
  p.residual.requires_grad_(true);
  FusionScope scope(fuse);
  if (add && !fuse) {
    // Eager mode's reference for the sum is the fused op, whose kernel rounds it once, as the
    // fold's does: the ops' twice-rounded sum may fall on the other side of the ReLU.
    p.relu_out = batch_norm_add_relu(p.x, p.residual, p.weight, p.bias, p.running_mean, p.running_var,
                                     {.training = true});
  } else {
    Tensor t = batch_norm(p.x, p.weight, p.bias, p.running_mean, p.running_var, {.training = true});
    p.relu_out = in_place ? relu_(t) : relu(add ? t + p.residual : t);
    if (keep_bn_out) p.kept_bn_out = t;
  }
  const Tensor y = conv2d(p.relu_out, p.conv_weight);
  y.to(kFloat32).sum().backward();
  scope.flush();
  p.stats = scope.stats();
  return p;
}

void expect_eager_results(const Pass& fused, const Pass& eager, double rtol, uint64_t seed) {
  // The ReLU of a rounded value is the rounded ReLU, and the folded backward masks bit for bit
  // as the ReLU's did: the same kernels' arithmetic on the same values.
  EXPECT_TRUE(same_bytes(fused.relu_out, eager.relu_out)) << "seed " << seed;
  EXPECT_TRUE(same_bytes(fused.running_mean, eager.running_mean)) << "seed " << seed;
  EXPECT_TRUE(same_bytes(fused.running_var, eager.running_var)) << "seed " << seed;
  // The gradients of the masked and the folded backward sum the same values, possibly in
  // another order.
  EXPECT_TRUE(testing::all_close(fused.x.grad().to(kFloat64), eager.x.grad().to(kFloat64), rtol, rtol))
      << "seed " << seed;
  EXPECT_TRUE(testing::all_close(fused.weight.grad(), eager.weight.grad(), rtol, rtol)) << "seed " << seed;
  EXPECT_TRUE(testing::all_close(fused.bias.grad(), eager.bias.grad(), rtol, rtol)) << "seed " << seed;
  EXPECT_TRUE(testing::all_close(fused.conv_weight.grad().to(kFloat64), eager.conv_weight.grad().to(kFloat64),
                                 rtol, rtol))
      << "seed " << seed;
}

TEST(FusionBatchNormCuda, AReluAfterABatchNormFoldsIntoItsKernelsForwardAndBackward) {
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const uint64_t seed = std::random_device{}();
  for (const auto& [dtype, channels_last, rtol] :
       {std::tuple{kFloat16, true, 2e-3}, std::tuple{kFloat32, false, 1e-5}}) {
    SCOPED_TRACE(dtype_name(dtype));
    const Pass eager = forward_backward(seed, dtype, channels_last, false, false);
    const Pass fused = forward_backward(seed, dtype, channels_last, true, false);
    if (fused.stats.recorded_ops == 0) GTEST_SKIP() << "the step compiler is off (NABLA_FUSION)";
    EXPECT_EQ(fused.stats.folded_relus, 2) << "the ReLU's forward and its backward";
    expect_eager_results(fused, eager, rtol, seed);
  }
}

TEST(FusionBatchNormCuda, AnInPlaceReluFoldsLikewise) {
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const uint64_t seed = std::random_device{}();
  const Pass eager = forward_backward(seed, kFloat16, true, false, false, true);
  const Pass fused = forward_backward(seed, kFloat16, true, true, false, true);
  if (fused.stats.recorded_ops == 0) GTEST_SKIP() << "the step compiler is off (NABLA_FUSION)";
  EXPECT_EQ(fused.stats.folded_relus, 2) << "the ReLU's forward and its backward";
  expect_eager_results(fused, eager, 2e-3, seed);
}

// relu(bn(x) + z) folds into the kernel of batch_norm_add_relu, which rounds the sum once where
// the ops round bn(x) and then the sum: it gives that op's values, not the ops'.
TEST(FusionBatchNormCuda, AReluOfABatchNormPlusAResidualFoldsItsForward) {
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const uint64_t seed = std::random_device{}();
  const Pass eager = forward_backward(seed, kFloat16, true, false, false, false, true);
  const Pass fused = forward_backward(seed, kFloat16, true, true, false, false, true);
  if (fused.stats.recorded_ops == 0) GTEST_SKIP() << "the step compiler is off (NABLA_FUSION)";
  EXPECT_EQ(fused.stats.folded_relus, 1) << "the forward only: the sum's gradient goes to z as well";
  expect_eager_results(fused, eager, 2e-3, seed);
  EXPECT_TRUE(
      testing::all_close(fused.residual.grad().to(kFloat64), eager.residual.grad().to(kFloat64), 2e-3, 2e-3))
      << "seed " << seed;
}

TEST(FusionBatchNormCuda, AnOutputTheCallerStillHoldsIsWrittenAndNothingIsFolded) {
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const uint64_t seed = std::random_device{}();
  const Pass eager = forward_backward(seed, kFloat16, true, false, true);
  const Pass fused = forward_backward(seed, kFloat16, true, true, true);
  if (fused.stats.recorded_ops == 0) GTEST_SKIP() << "the step compiler is off (NABLA_FUSION)";
  EXPECT_EQ(fused.stats.folded_relus, 0);
  EXPECT_TRUE(same_bytes(fused.kept_bn_out, eager.kept_bn_out)) << "seed " << seed;
  expect_eager_results(fused, eager, 2e-3, seed);
}

}  // namespace
}  // namespace nabla
