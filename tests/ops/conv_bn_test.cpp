// conv2d_sums and batch_norm_relu_conv2d where nothing fuses (the CPU): the values, running-stat
// updates and gradients of the composed ops, sums left undefined, and clear errors. The fused
// CUDA path is checked against these compositions in tests/ops/cuda/conv_bn_fusion_test.cpp.
#include <cmath>

#include "test_util.h"

namespace nabla {
namespace {

using namespace testing;  // NOLINT: test helpers

TEST(ConvBatchNorm, SumsAreLeftUndefinedWhereNothingFuses) {
  const uint64_t seed = test_seed();
  const Tensor x = random_input({2, 3, 6, 6}, seed), w = random_input({4, 3, 3, 3}, seed + 1);
  ChannelSums sums;
  sums.tensor = x.impl_ptr();  // stale contents are cleared
  const Tensor y = conv2d_sums(x, w, {.padding = 1}, &sums);
  EXPECT_FALSE(sums.sum.defined());
  EXPECT_FALSE(sums.describes(y));
  EXPECT_TRUE(all_close(y, conv2d(x, w, {}, {.padding = 1}), 1e-12, 1e-12));
  EXPECT_NABLA_ERROR(conv2d_sums(x, w, {}, nullptr), "sums must not be null");
}

// The sums describe one tensor at one version: not a write since, not a view, not another tensor
// that reuses the memory of a freed one.
TEST(ConvBatchNorm, SumsDescribeOneTensorAtOneVersion) {
  Tensor y = random_input({2, 4, 3, 3}, test_seed());
  ChannelSums sums{.sum = zeros({4}), .sqsum = zeros({4}), .tensor = y.impl_ptr(), .version = y.version()};
  EXPECT_TRUE(sums.describes(y));
  EXPECT_FALSE(sums.describes(y.narrow(1, 0, 2)));
  EXPECT_FALSE(sums.describes(y.clone()));
  y.add_(1.0);
  EXPECT_FALSE(sums.describes(y));
  sums.version = y.version();
  EXPECT_TRUE(sums.describes(y));
  y = Tensor();
  EXPECT_TRUE(sums.tensor.expired());
  EXPECT_FALSE(sums.describes(random_input({2, 4, 3, 3}, test_seed() + 1)));
  ChannelSums empty;
  EXPECT_FALSE(empty.describes(random_input({2, 4, 3, 3}, test_seed() + 2)));
}

TEST(ConvBatchNorm, BatchNormReluConvIsTheComposition) {
  const uint64_t seed = test_seed();
  const Tensor y0 = random_input({3, 4, 5, 5}, seed), w0 = random_input({6, 4, 3, 3}, seed + 1);
  const Tensor gamma0 = random_input({4}, seed + 2), beta0 = random_input({4}, seed + 3);
  const Tensor rm0 = random_input({4}, seed + 4), rv0 = random_input({4}, seed + 5).abs() + 0.5;
  const BatchNormOptions bn{.momentum = 0.2, .eps = 1e-4};
  const Conv2dOptions conv{.stride = 2, .padding = 1};
  const Tensor r = random_input({3, 6, 3, 3}, seed + 6);
  struct Run {
    Tensor out, rm, rv;
    TensorList grads;
  };
  const auto run = [&](bool joined) {
    Tensor y = y0.clone().requires_grad_(), w = w0.clone().requires_grad_();
    Tensor gamma = gamma0.clone().requires_grad_(), beta = beta0.clone().requires_grad_();
    Tensor rm = rm0.clone(), rv = rv0.clone();
    ChannelSums out_sums;
    Tensor out = joined
                     ? batch_norm_relu_conv2d(y, ChannelSums{}, gamma, beta, rm, rv, bn, w, conv, &out_sums)
                     : conv2d(batch_norm_relu(y, gamma, beta, rm, rv, bn), w, {}, conv);
    EXPECT_FALSE(out_sums.sum.defined());
    (out * r).sum().backward();
    return Run{out, rm, rv, {y.grad(), w.grad(), gamma.grad(), beta.grad()}};
  };
  const Run got = run(true), want = run(false);
  EXPECT_TRUE(all_close(got.out, want.out, 1e-12, 1e-12));
  EXPECT_TRUE(all_close(got.rm, want.rm, 1e-12, 1e-12));
  EXPECT_TRUE(all_close(got.rv, want.rv, 1e-12, 1e-12));
  EXPECT_FALSE(all_close(got.rm, rm0, 1e-6, 1e-6));  // the running stats did move
  for (size_t i = 0; i < got.grads.size(); ++i)
    EXPECT_TRUE(all_close(got.grads[i], want.grads[i], 1e-12, 1e-12)) << "gradient " << i;
}

// Where nothing fuses (the CPU), batch_norm_from_sums is batch_norm, batch_norm_relu or
// batch_norm_add_relu: values, running statistics and every gradient.
TEST(ConvBatchNorm, BatchNormFromSumsIsTheNamedOp) {
  const uint64_t seed = test_seed();
  const Tensor y0 = random_input({3, 4, 5, 5}, seed), r0 = random_input({3, 4, 5, 5}, seed + 1);
  const Tensor gamma0 = random_input({4}, seed + 2), beta0 = random_input({4}, seed + 3);
  const Tensor rm0 = random_input({4}, seed + 4), rv0 = random_input({4}, seed + 5).abs() + 0.5;
  const Tensor g = random_input({3, 4, 5, 5}, seed + 6);
  const BatchNormOptions bn{.momentum = 0.3, .eps = 1e-3};
  for (const auto& [relu, residual] : {std::pair{false, false}, {true, false}, {true, true}}) {
    const auto run = [&, relu = relu, residual = residual](bool from_sums) {
      Tensor y = y0.clone().requires_grad_(), r = residual ? r0.clone().requires_grad_() : Tensor();
      Tensor gamma = gamma0.clone().requires_grad_(), beta = beta0.clone().requires_grad_();
      Tensor rm = rm0.clone(), rv = rv0.clone();
      Tensor out;
      if (from_sums) {
        out = batch_norm_from_sums(y, ChannelSums{}, r, relu, gamma, beta, rm, rv, bn);
      } else {
        out = residual ? batch_norm_add_relu(y, r, gamma, beta, rm, rv, bn)
              : relu   ? batch_norm_relu(y, gamma, beta, rm, rv, bn)
                       : batch_norm(y, gamma, beta, rm, rv, bn);
      }
      (out * g).sum().backward();
      return TensorList{out, rm, rv, y.grad(), gamma.grad(), beta.grad(), residual ? r.grad() : zeros({1})};
    };
    const TensorList got = run(true), want = run(false);
    for (size_t i = 0; i < got.size(); ++i)
      EXPECT_TRUE(all_close(got[i], want[i], 1e-12, 1e-12))
          << "relu " << relu << " residual " << residual << " result " << i;
    EXPECT_FALSE(all_close(got[1], rm0, 1e-6, 1e-6));  // the running mean did move
  }
  Tensor gamma = gamma0.clone(), beta = beta0.clone(), rm = rm0.clone(), rv = rv0.clone();
  EXPECT_NABLA_ERROR(batch_norm_from_sums(y0, {}, r0, /*relu=*/false, gamma, beta, rm, rv),
                     "pass relu = true with it");
  nn::BatchNorm2d layer(4);
  EXPECT_NABLA_ERROR(layer.forward_from_sums(y0, {}, r0, /*relu=*/false), "pass relu = true with it");
}

TEST(ConvBatchNorm, BadArgumentsNameTheProblem) {
  const uint64_t seed = test_seed();
  const Tensor y = random_input({2, 4, 5, 5}, seed), w = random_input({6, 3, 3, 3}, seed + 1);
  Tensor gamma = ones({4}, {.dtype = kFloat64}), beta = zeros({4}, {.dtype = kFloat64});
  Tensor rm = zeros({4}, {.dtype = kFloat64}), rv = ones({4}, {.dtype = kFloat64});
  // The convolution expects 3 input channels; the batch norm's output has 4.
  EXPECT_NABLA_ERROR(batch_norm_relu_conv2d(y, {}, gamma, beta, rm, rv, {}, w, {}), "has 4 channels");
  Tensor short_gamma = ones({3}, {.dtype = kFloat64});
  EXPECT_NABLA_ERROR(
      batch_norm_relu_conv2d(y, {}, short_gamma, beta, rm, rv, {}, random_input({6, 4, 1, 1}, seed), {}),
      "expected weight of shape [4]");
}

}  // namespace
}  // namespace nabla
