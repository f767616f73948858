// nn::MultiheadAttention and nn::RMSNorm on the CPU: PyTorch's parameter names and shapes, the
// forward against the projections and per-head attention computed by hand, the module's mask
// convention (true hides), and the errors. tests/interop/attention_torch_test.cpp compares the
// module with torch.nn.MultiheadAttention itself.
#include <cmath>

#include "test_util.h"

namespace nabla {
namespace {

using namespace testing;  // NOLINT: test helpers

TEST(MultiheadAttention, HasPyTorchsParameterNamesAndShapes) {
  nn::MultiheadAttention attn({.embed_dim = 12, .num_heads = 3});
  std::vector<std::pair<std::string, Shape>> expect = {{"in_proj_weight", {36, 12}},
                                                       {"in_proj_bias", {36}},
                                                       {"out_proj.weight", {12, 12}},
                                                       {"out_proj.bias", {12}}};
  const auto named = attn.named_parameters();
  ASSERT_EQ(named.size(), expect.size());
  for (size_t i = 0; i < named.size(); ++i) {
    EXPECT_EQ(named[i].first, expect[i].first);
    EXPECT_EQ(named[i].second.sizes(), expect[i].second);
  }
  EXPECT_EQ(attn.in_proj_bias.abs().sum().item<double>(), 0.0);  // PyTorch starts the biases at 0
  nn::MultiheadAttention no_bias({.embed_dim = 12, .num_heads = 3, .bias = false});
  EXPECT_EQ(no_bias.named_parameters().size(), 2u);
}

TEST(MultiheadAttention, ForwardIsTheHeadsComputedByHand) {
  const int64_t E = 8, H = 2, D = 4, N = 2, L = 5;
  nn::MultiheadAttention attn({.embed_dim = E, .num_heads = H, .batch_first = true});
  attn.to(kFloat64);
  const Tensor x = random_input({N, L, E}, test_seed());
  const Tensor pad =
      tensor<uint8_t>({0, 0, 0, 0, 1, 0, 0, 0, 0, 0}, {N, L}).to(kBool);  // hides key 4 of batch 0
  const Tensor y = attn.forward(x, x, x, {.key_padding_mask = pad, .causal = true});

  const Tensor proj = matmul(x, attn.in_proj_weight.t()) + attn.in_proj_bias;  // (N, L, 3E)
  auto minus_inf_where = [](const Tensor& hidden) {
    return where(hidden, full({}, -INFINITY, {.dtype = kFloat64}), zeros({}, {.dtype = kFloat64}));
  };
  const Tensor bias = minus_inf_where(triu(ones({L, L}, {.dtype = kBool}), {.diagonal = 1})) +
                      minus_inf_where(pad).view({N, 1, L});  // (N, L, L)
  std::vector<Tensor> heads;
  for (int64_t h = 0; h < H; ++h) {
    const Tensor q = proj.narrow(2, h * D, D), k = proj.narrow(2, E + h * D, D),
                 v = proj.narrow(2, 2 * E + h * D, D);
    Tensor s = matmul(q, k.transpose(1, 2)) / std::sqrt(static_cast<double>(D));  // (N, L, L)
    heads.push_back(matmul(softmax(s + bias, -1), v));
  }
  const Tensor expect = matmul(cat(heads, 2), attn.out_proj.weight.t()) + attn.out_proj.bias;
  EXPECT_TRUE(all_close(y, expect, 1e-12, 1e-12));
}

TEST(MultiheadAttention, SequenceFirstLayoutAndErrors) {
  nn::MultiheadAttention attn({.embed_dim = 8, .num_heads = 2});
  const Tensor x = random_input({5, 3, 8}, test_seed(), kFloat32);  // (L, N, E)
  nn::MultiheadAttention batch_first({.embed_dim = 8, .num_heads = 2, .batch_first = true});
  batch_first.load_state_dict(attn.state_dict());
  EXPECT_TRUE(all_close(attn(x), batch_first(x.transpose(0, 1)).transpose(0, 1), 1e-5, 1e-6));
  EXPECT_NABLA_ERROR(nn::MultiheadAttention({.embed_dim = 10, .num_heads = 3}), "divisible by num_heads");
  EXPECT_NABLA_ERROR(nn::MultiheadAttention({}), "MultiheadAttention", "embed_dim (0) must be > 0");
  EXPECT_NABLA_ERROR(attn(random_input({5, 3, 6}, 1, kFloat32)), "MultiheadAttention", "8 features");
  EXPECT_NABLA_ERROR(attn.forward(x, x, x, {.attn_mask = ones({4, 5}, {.dtype = kBool})}),
                     "attn_mask must be (5, 5)");
}

TEST(RMSNorm, ModuleScalesByItsWeight) {
  nn::RMSNorm norm({6}, {.eps = 1e-6});
  ASSERT_EQ(norm.named_parameters().size(), 1u);
  EXPECT_EQ(norm.weight.sizes(), (Shape{6}));
  const Tensor x = random_input({4, 6}, test_seed(), kFloat32);
  {
    NoGradGuard no_grad;
    norm.weight.mul_(2.0);
  }
  const Tensor rms = sqrt((x * x).mean({1}, true) + 1e-6);
  EXPECT_TRUE(all_close(norm(x), x / rms * 2.0, 1e-5, 1e-6));
  EXPECT_TRUE(nn::RMSNorm({6}, {.elementwise_affine = false}).named_parameters().empty());
}

}  // namespace
}  // namespace nabla
