// nabla-bench train --plain: the plainly written ResNet-50 is torchvision's structure with the
// model zoo's (torchvision's) names, so it loads the zoo's state dict, and from the same weights
// it computes what nn::models::resnet50 computes, forward and backward, on the CPU in float64.
#include <gtest/gtest.h>

#include "nabla/nabla.h"
#include "nabla_bench/plain_resnet.h"
#include "test_util.h"

namespace nabla::testing {
namespace {

TEST(PlainResNet, LoadsTheModelZoosWeightsAndComputesWhatItComputes) {
  manual_seed(7);
  auto zoo = nn::models::resnet("resnet50", {.num_classes = 10});
  auto plain = bench::plain_resnet("resnet50", 10);
  zoo->to(kFloat64);
  plain->to(kFloat64);
  std::vector<std::string> zoo_names, plain_names;
  for (const auto& [n, _] : zoo->named_parameters()) zoo_names.push_back(n);
  for (const auto& [n, _] : plain->named_parameters()) plain_names.push_back(n);
  EXPECT_EQ(plain_names, zoo_names);
  plain->load_state_dict(zoo->state_dict());

  const Tensor x = random_input({2, 3, 48, 48}, 11, kFloat64);
  zoo->train();
  plain->train();
  const Tensor xa = x.detach().requires_grad_(true), xb = x.detach().requires_grad_(true);
  const Tensor ya = zoo->forward(xa), yb = plain->forward(xb);
  EXPECT_TRUE(all_close(yb, ya, 1e-10, 1e-10));
  (ya * ya).sum().backward();
  (yb * yb).sum().backward();
  EXPECT_TRUE(all_close(xb.grad(), xa.grad(), 1e-9, 1e-10));
}

TEST(PlainResNet, NamesTheArchitecturesItWrites) {
  EXPECT_THROW(bench::plain_resnet("resnet18"), Error);
  EXPECT_NO_THROW(bench::plain_resnet("resnet101", 10));
}

}  // namespace
}  // namespace nabla::testing
