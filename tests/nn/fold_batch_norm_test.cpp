// fold_batch_norm and ResNet::fuse_for_inference on the CPU: a folded model computes the eval
// model's function (float64, running statistics made non-trivial by training forwards), and the
// misuses fail clearly.
#include <gtest/gtest.h>

#include "test_util.h"

namespace nabla::testing {
namespace {

TEST(FoldBatchNorm, AFoldedResNetComputesTheEvalModelsFunction) {
  const uint64_t seed = test_seed();
  for (const char* arch : {"resnet18", "resnet50"}) {
    manual_seed(seed);
    auto model = nn::models::resnet(arch, {.num_classes = 10, .small_input_stem = true});
    model->to(kFloat64);
    {
      NoGradGuard no_grad;
      for (int i = 0; i < 2; ++i) model->forward(random_input({4, 3, 16, 16}, seed + i) * 2.0 + 0.5);
    }
    model->eval();
    Tensor x = random_input({3, 3, 16, 16}, seed + 5);
    Tensor want = model->forward(x).detach();
    model->fuse_for_inference();
    Tensor got = model->forward(x).detach();
    EXPECT_TRUE(all_close(got, want, 1e-9, 1e-10)) << arch;
  }
}

TEST(FoldBatchNorm, MisusesFailClearly) {
  nn::Conv2d conv({.in = 3, .out = 4, .kernel = 3, .bias = false});
  nn::BatchNorm2d bn(4);
  EXPECT_NABLA_ERROR(nn::fold_batch_norm(conv, bn), "eval mode");
  conv.eval();
  bn.eval();
  nn::BatchNorm2d wrong(5);
  wrong.eval();
  EXPECT_NABLA_ERROR(nn::fold_batch_norm(conv, wrong), "4 output channels", "5");
  nn::fold_batch_norm(conv, bn);
  EXPECT_TRUE(bn.folded());
  EXPECT_TRUE(conv.bias.defined());
  EXPECT_NABLA_ERROR(nn::fold_batch_norm(conv, bn), "folded already");
  conv.train();
  EXPECT_NABLA_ERROR(nn::conv_bn_relu(conv, bn, random_input({1, 3, 5, 5}, test_seed())),
                     "training it is not");
  auto model = nn::models::resnet18();
  EXPECT_NABLA_ERROR(model->fuse_for_inference(), "eval()");
}

}  // namespace
}  // namespace nabla::testing
