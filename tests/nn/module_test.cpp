// Module registration, dotted names, state dicts, modes, conversion, zero_grad and apply.
#include <gtest/gtest.h>

#include <set>

#include "test_util.h"

namespace nb = nabla;
namespace nn = nabla::nn;
using nabla::testing::all_close;
using nabla::testing::random_input;
using nabla::testing::test_seed;

namespace {

// The example of API.md: a residual block written with the public API.
struct Block : nn::Module {
  nn::Conv2d conv1, conv2;
  nn::BatchNorm2d bn1, bn2;
  explicit Block(int64_t c)
      : conv1({.in = c, .out = c, .kernel = 3, .padding = 1, .bias = false}),
        conv2({.in = c, .out = c, .kernel = 3, .padding = 1, .bias = false}),
        bn1(c),
        bn2(c) {
    register_modules({{"conv1", conv1}, {"bn1", bn1}, {"conv2", conv2}, {"bn2", bn2}});
  }
  nb::Tensor forward(const nb::Tensor& x) override {
    auto y = nb::relu(bn1(conv1(x)));
    return nb::relu(bn2(conv2(y)) + x);
  }
};

struct Net : nn::Module {
  nn::Conv2d stem;
  Block block;
  nn::Sequential head;
  nb::Tensor scale;
  Net()
      : stem({.in = 2, .out = 4, .kernel = 3, .padding = 1}),
        block(4),
        head({std::make_shared<nn::AdaptiveAvgPool2d>(nb::PoolPair{1, 1}), std::make_shared<nn::Flatten>(),
              std::make_shared<nn::Linear>(nn::LinearOptions{.in = 4, .out = 3})}),
        scale(nb::ones({3})) {
    register_modules({{"stem", stem}, {"block", block}, {"head", head}});
    register_parameter("scale", scale);
  }
  nb::Tensor forward(const nb::Tensor& x) override { return head(block(stem(x))) * scale; }
};

std::vector<std::string> names(const std::vector<std::pair<std::string, nb::Tensor>>& list) {
  std::vector<std::string> out;
  for (const auto& [n, _] : list) out.push_back(n);
  return out;
}

}  // namespace

TEST(Module, DottedNamesInRegistrationOrder) {
  Net net;
  // Own parameters first, then each child's, as PyTorch's named_parameters.
  std::vector<std::string> expected{
      "scale",          "stem.weight",        "stem.bias",        "block.conv1.weight", "block.bn1.weight",
      "block.bn1.bias", "block.conv2.weight", "block.bn2.weight", "block.bn2.bias",     "head.2.weight",
      "head.2.bias"};
  EXPECT_EQ(names(net.named_parameters()), expected);
  std::vector<std::string> buffers{"block.bn1.running_mean",        "block.bn1.running_var",
                                   "block.bn1.num_batches_tracked", "block.bn2.running_mean",
                                   "block.bn2.running_var",         "block.bn2.num_batches_tracked"};
  EXPECT_EQ(names(net.named_buffers()), buffers);
  EXPECT_EQ(net.parameters().size(), expected.size());
  for (const auto& p : net.parameters()) {
    EXPECT_TRUE(p.requires_grad());
    EXPECT_TRUE(p.is_leaf());
  }
  EXPECT_EQ(names(net.named_parameters(/*recurse=*/false)), std::vector<std::string>{"scale"});
  EXPECT_EQ(net.children().size(), 3u);
  std::vector<std::string> modules;
  for (const auto& [n, _] : net.named_modules()) modules.push_back(n);
  EXPECT_EQ(modules, (std::vector<std::string>{"", "stem", "block", "block.conv1", "block.bn1", "block.conv2",
                                               "block.bn2", "head", "head.0", "head.1", "head.2"}));
  auto sd = net.state_dict();
  EXPECT_EQ(sd.size(), expected.size() + buffers.size());
  EXPECT_EQ(sd.at("block.bn1.num_batches_tracked").dtype(), nb::kInt64);
}

TEST(Module, RegistrationRejectsBadNames) {
  struct Bad : nn::Module {
    nb::Tensor a = nb::zeros({1}), b = nb::zeros({1});
    void dup() {
      register_parameter("a", a);
      register_buffer("a", b);
    }
    void dotted() { register_parameter("x.y", a); }
  };
  Bad bad;
  EXPECT_NABLA_ERROR(bad.dup(), "\"a\"", "already registered");
  EXPECT_NABLA_ERROR(bad.dotted(), "x.y");
}

TEST(Module, ContainersNameAndCallChildren) {
  nn::ModuleList list{std::make_shared<nn::Linear>(nn::LinearOptions{.in = 2, .out = 3})};
  list.emplace_back<nn::Linear>(nn::LinearOptions{.in = 3, .out = 1, .bias = false});
  EXPECT_EQ(names(list.named_parameters()), (std::vector<std::string>{"0.weight", "0.bias", "1.weight"}));
  nn::ModuleDict dict{{"enc", std::make_shared<nn::Linear>(nn::LinearOptions{.in = 2, .out = 2})}};
  dict.insert("act", std::make_shared<nn::ReLU>());
  EXPECT_TRUE(dict.contains("act"));
  EXPECT_EQ(names(dict.named_parameters()), (std::vector<std::string>{"enc.weight", "enc.bias"}));
  EXPECT_NABLA_ERROR(dict.insert("act", std::make_shared<nn::ReLU>()), "act");
  EXPECT_NABLA_ERROR(dict["nope"], "nope");

  nn::Sequential seq;
  auto& fc1 = seq.emplace_back<nn::Linear>(
      nn::LinearOptions{.in = 4, .out = 5, .tensor_options = {.dtype = nb::kFloat64}});
  seq.emplace_back<nn::ReLU>();
  auto& fc2 = seq.emplace_back<nn::Linear>(
      nn::LinearOptions{.in = 5, .out = 2, .tensor_options = {.dtype = nb::kFloat64}});
  nb::Tensor x = random_input({3, 4}, test_seed());
  nb::Tensor expected = nb::relu(x.matmul(fc1.weight.t()) + fc1.bias).matmul(fc2.weight.t()) + fc2.bias;
  EXPECT_TRUE(all_close(seq(x), expected, 1e-12, 1e-12));
  EXPECT_EQ(seq.size(), 3u);
}

TEST(Module, StateDictRoundTripIntoFreshModel) {
  Net a;
  nb::manual_seed(test_seed());
  Net b;  // different random weights
  {
    nb::NoGradGuard no_grad;
    a.block.bn1.running_mean.copy_(random_input({4}, test_seed(), nb::kFloat32));
    a.block.bn1.num_batches_tracked.fill_(7);
  }
  auto result = b.load_state_dict(a.state_dict());
  EXPECT_TRUE(result.missing_keys.empty() && result.unexpected_keys.empty());
  auto sa = a.state_dict(), sb = b.state_dict();
  for (const auto& [name, t] : sa) {
    EXPECT_TRUE(all_close(sb.at(name), t, 0, 0)) << name;
    EXPECT_FALSE(sb.at(name).is_same(t)) << name;  // copied, not aliased
  }
  // Loaded in place: the member tensors themselves hold the values, and stay leaves.
  EXPECT_TRUE(all_close(b.stem.weight, a.stem.weight, 0, 0));
  EXPECT_TRUE(b.stem.weight.is_leaf() && b.stem.weight.requires_grad());
  EXPECT_EQ(b.block.bn1.num_batches_tracked.item<int64_t>(), 7);
  nb::Tensor x = random_input({2, 2, 5, 5}, test_seed(), nb::kFloat32);
  a.eval();
  b.eval();
  EXPECT_TRUE(all_close(b(x), a(x), 0, 0));
}

TEST(Module, LoadErrorsNameEveryBadKey) {
  Net net;
  auto sd = net.state_dict();
  sd.erase("stem.bias");
  sd.erase("block.bn2.running_var");
  sd["head.9.weight"] = nb::zeros({1});
  sd["stem.weight"] = nb::zeros({4, 2, 5, 5});
  EXPECT_NABLA_ERROR(net.load_state_dict(sd), "missing", "stem.bias", "block.bn2.running_var", "unexpected",
                     "head.9.weight", "wrongly shaped", "stem.weight", "[4, 2, 3, 3]", "[4, 2, 5, 5]");
  // Non-strict: a shape mismatch is still an error; missing and unexpected keys are returned.
  EXPECT_NABLA_ERROR(net.load_state_dict(sd, /*strict=*/false), "stem.weight");
  sd.erase("stem.weight");
  auto result = net.load_state_dict(sd, /*strict=*/false);
  std::set<std::string> missing(result.missing_keys.begin(), result.missing_keys.end());
  EXPECT_EQ(missing, (std::set<std::string>{"stem.weight", "stem.bias", "block.bn2.running_var"}));
  EXPECT_EQ(result.unexpected_keys, std::vector<std::string>{"head.9.weight"});
}

TEST(Module, TrainEvalReachesAllChildren) {
  Net net;
  net.eval();
  for (const auto& [n, m] : net.named_modules()) EXPECT_FALSE(m->is_training()) << n;
  net.train();
  for (const auto& [n, m] : net.named_modules()) EXPECT_TRUE(m->is_training()) << n;
  // BN counts batches in training only.
  nb::Tensor x = random_input({2, 2, 4, 4}, test_seed(), nb::kFloat32);
  net(x);
  EXPECT_EQ(net.block.bn1.num_batches_tracked.item<int64_t>(), 1);
  net.eval();
  net(x);
  EXPECT_EQ(net.block.bn1.num_batches_tracked.item<int64_t>(), 1);
}

TEST(Module, ToChannelsLastAndDtype) {
  Net net;
  nb::Tensor before = net.block.conv1.weight.clone();
  net.to(nb::MemoryFormat::ChannelsLast);
  EXPECT_TRUE(net.block.conv1.weight.is_contiguous(nb::MemoryFormat::ChannelsLast));
  EXPECT_FALSE(net.block.conv1.weight.is_contiguous());
  EXPECT_TRUE(net.stem.weight.is_contiguous(nb::MemoryFormat::ChannelsLast));
  EXPECT_TRUE(all_close(net.block.conv1.weight, before, 0, 0));
  // The registered tensor is the member: named_parameters sees the converted one.
  for (const auto& [n, p] : net.named_parameters()) {
    EXPECT_TRUE(p.is_leaf() && p.requires_grad()) << n;
    if (p.dim() == 4) {
      EXPECT_TRUE(p.is_contiguous(nb::MemoryFormat::ChannelsLast)) << n;
    }
  }
  net.to(nb::kFloat64);
  EXPECT_EQ(net.stem.weight.dtype(), nb::kFloat64);
  EXPECT_EQ(net.block.bn1.running_var.dtype(), nb::kFloat64);
  EXPECT_EQ(net.block.bn1.num_batches_tracked.dtype(), nb::kInt64);  // integers stay
  EXPECT_TRUE(all_close(net.block.conv1.weight, before, 1e-7, 0));
  nb::Tensor x = random_input({2, 2, 4, 4}, test_seed());
  EXPECT_EQ(net(x).sizes(), (nb::Shape{2, 3}));
  net.to(nb::Device::cpu(), nb::MemoryFormat::Contiguous);
  EXPECT_TRUE(net.stem.weight.is_contiguous());
}

TEST(Module, ZeroGradAndApply) {
  Net net;
  nb::Tensor x = random_input({2, 2, 4, 4}, test_seed(), nb::kFloat32);
  net(x).sum().backward();
  for (const auto& [n, p] : net.named_parameters()) EXPECT_TRUE(p.grad().defined()) << n;
  net.zero_grad(/*set_to_none=*/false);
  for (const auto& [n, p] : net.named_parameters()) {
    ASSERT_TRUE(p.grad().defined()) << n;
    EXPECT_EQ(p.grad().abs().sum().item<float>(), 0.0f) << n;
  }
  net.zero_grad();
  for (const auto& [n, p] : net.named_parameters()) EXPECT_FALSE(p.grad().defined()) << n;

  // apply visits children before parents, every module once.
  std::vector<nn::Module*> visited;
  net.apply([&](nn::Module& m) { visited.push_back(&m); });
  EXPECT_EQ(visited.size(), net.named_modules().size());
  EXPECT_EQ(visited.back(), &net);
  net.apply([](nn::Module& m) {
    if (auto* conv = dynamic_cast<nn::Conv2d*>(&m)) nn::init::constant_(conv->weight, 0.5);
  });
  EXPECT_EQ(nb::min(net.stem.weight).item<float>(), 0.5f);
  EXPECT_EQ(nb::max(net.block.conv2.weight).item<float>(), 0.5f);
}

namespace {

// A language model's tied embedding and output layer (Note [Tied parameters] in nn/module.cpp).
struct TiedLm : nn::Module {
  nn::Embedding wte;
  nn::Linear lm_head;
  TiedLm() : wte(11, 6), lm_head({.in = 6, .out = 11, .bias = false}) {
    register_modules({{"wte", wte}, {"lm_head", lm_head}});
    lm_head.weight = wte.weight;
  }
  nb::Tensor forward(const nb::Tensor& tokens) override { return lm_head(wte(tokens)); }
};

}  // namespace

TEST(Module, TiedParameterIsListedOnceAndSavedUnderBothNames) {
  TiedLm lm;
  const auto named = lm.named_parameters();
  ASSERT_EQ(named.size(), 1u);
  EXPECT_EQ(named[0].first, "wte.weight");
  const nn::StateDict state = lm.state_dict();
  ASSERT_EQ(state.size(), 2u);
  EXPECT_EQ(state.at("wte.weight").storage(), state.at("lm_head.weight").storage());

  // One gradient, the sum of both uses; the optimizer steps it once.
  const nb::Tensor tokens = nb::tensor<int64_t>({1, 4, 9, 4});
  lm.forward(tokens).sum().backward();
  const nb::Tensor grad = lm.wte.weight.grad();
  ASSERT_TRUE(grad.defined());
  const nb::Tensor before = lm.wte.weight.detach().clone();
  nb::optim::SGD opt(lm.parameters(), {.lr = 0.5});
  opt.step();
  EXPECT_TRUE(all_close(lm.lm_head.weight, before - grad * 0.5, 1e-6, 1e-7));
  EXPECT_TRUE(lm.lm_head.weight.is_same(lm.wte.weight));
}

TEST(Module, TieSurvivesToAndEitherKeyRestoresIt) {
  TiedLm lm;
  lm.to(nb::kFloat64);
  EXPECT_TRUE(lm.lm_head.weight.is_same(lm.wte.weight));
  EXPECT_EQ(lm.parameters().size(), 1u);

  const nb::Tensor values = random_input({11, 6}, test_seed());
  for (const char* key : {"wte.weight", "lm_head.weight"}) {
    TiedLm fresh;
    fresh.to(nb::kFloat64);
    fresh.load_state_dict({{key, values}});  // strict: the other holder is the same tensor
    EXPECT_TRUE(all_close(fresh.wte.weight, values, 0, 0)) << key;
    EXPECT_TRUE(fresh.lm_head.weight.is_same(fresh.wte.weight)) << key;
  }
  // A dict of an untied model (both keys) loads too; the tie keeps one tensor.
  TiedLm other;
  other.load_state_dict(lm.state_dict());
  EXPECT_TRUE(other.lm_head.weight.is_same(other.wte.weight));
}
