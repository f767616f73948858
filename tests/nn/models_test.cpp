// ResNet parameter counts, torchvision's state_dict names, output shapes and options; the small
// reference CNN's shapes; and a CPU training run of the small CNN to 100% train accuracy.
#include <gtest/gtest.h>

#include <set>

#include "test_util.h"

namespace nb = nabla;
namespace nn = nabla::nn;
namespace models = nabla::nn::models;
using nabla::testing::random_input;
using nabla::testing::test_seed;

namespace {

int64_t count_parameters(const nn::Module& m) {
  int64_t n = 0;
  for (const auto& p : m.parameters()) n += p.numel();
  return n;
}

std::vector<std::string> bn_keys(const std::string& prefix, bool with_buffers) {
  std::vector<std::string> keys{prefix + ".weight", prefix + ".bias"};
  if (with_buffers) {
    for (const char* b : {".running_mean", ".running_var", ".num_batches_tracked"})
      keys.push_back(prefix + b);
  }
  return keys;
}

// torchvision's naming rule for a bottleneck ResNet (torchvision/models/resnet.py): stem conv1 and
// bn1; layer{1..4}.{i} with conv1..3 / bn1..3; downsample.0 (conv) and downsample.1 (BN) on each
// stage's first block (the channel count changes on all four); fc. In state_dict order when
// with_buffers (each module's parameters, then its buffers), named_parameters order otherwise.
std::vector<std::string> torchvision_bottleneck_keys(std::array<int, 4> blocks, bool with_buffers) {
  std::vector<std::string> keys{"conv1.weight"};
  auto append = [&](const std::vector<std::string>& more) {
    keys.insert(keys.end(), more.begin(), more.end());
  };
  append(bn_keys("bn1", with_buffers));
  for (int s = 0; s < 4; ++s) {
    for (int b = 0; b < blocks[s]; ++b) {
      std::string block = "layer" + std::to_string(s + 1) + "." + std::to_string(b);
      for (int c = 1; c <= 3; ++c) {
        keys.push_back(block + ".conv" + std::to_string(c) + ".weight");
        append(bn_keys(block + ".bn" + std::to_string(c), with_buffers));
      }
      if (b == 0) {
        keys.push_back(block + ".downsample.0.weight");
        append(bn_keys(block + ".downsample.1", with_buffers));
      }
    }
  }
  append({"fc.weight", "fc.bias"});
  return keys;
}

// Building a ResNet-50 draws 25M random numbers twice (about 2 s on one core): the tests share one.
models::ResNet& shared_resnet50() {
  static std::shared_ptr<models::ResNet> model = models::resnet50();
  return *model;
}

}  // namespace

TEST(ResNet, ParameterCountsMatchTorchvision) {
  // torchvision's documented parameter counts (the weights tables of torchvision.models, e.g.
  // ResNet50_Weights.IMAGENET1K_V1.meta["num_params"] = 25557032).
  EXPECT_EQ(count_parameters(*models::resnet18()), 11689512);
  EXPECT_EQ(count_parameters(*models::resnet34()), 21797672);
  EXPECT_EQ(count_parameters(shared_resnet50()), 25557032);
  EXPECT_EQ(count_parameters(*models::resnet101()), 44549160);
  EXPECT_EQ(count_parameters(*models::resnet152()), 60192808);
}

TEST(ResNet, ByNameBuildsTheNamedDepthAndRejectsOtherNames) {
  EXPECT_EQ(count_parameters(*models::resnet("resnet18", {.num_classes = 10})), 11181642);  // 10 classes
  EXPECT_EQ(count_parameters(*models::resnet("resnet34")), 21797672);
  EXPECT_NABLA_ERROR(models::resnet("resnet51"), "unknown ResNet 'resnet51'", "resnet18, resnet34, resnet50");
}

TEST(ResNet, Resnet50NamesAreTorchvisions) {
  models::ResNet* model = &shared_resnet50();
  // len(torchvision.models.resnet50().state_dict()) == 320: 53 convs, 53 BNs * 5, fc * 2.
  auto expected = torchvision_bottleneck_keys({3, 4, 6, 3}, true);
  ASSERT_EQ(expected.size(), 320u);
  auto sd = model->state_dict();
  EXPECT_EQ(sd.size(), 320u);
  std::set<std::string> got;
  for (const auto& [k, _] : sd) got.insert(k);
  EXPECT_EQ(got, std::set<std::string>(expected.begin(), expected.end()));
  // named_parameters in torchvision's order (161 tensors).
  std::vector<std::string> names;
  for (const auto& [n, _] : model->named_parameters()) names.push_back(n);
  EXPECT_EQ(names, torchvision_bottleneck_keys({3, 4, 6, 3}, false));
  EXPECT_EQ(names.size(), 161u);
  EXPECT_EQ(sd.at("layer1.0.downsample.1.num_batches_tracked").dtype(), nb::kInt64);
  EXPECT_EQ(sd.at("layer4.2.conv3.weight").sizes(), (nb::Shape{2048, 512, 1, 1}));
  EXPECT_EQ(sd.at("layer2.0.conv2.weight").sizes(), (nb::Shape{128, 128, 3, 3}));  // v1.5 stride here
  EXPECT_EQ(sd.at("fc.weight").sizes(), (nb::Shape{1000, 2048}));
  // ResNet-18: basic blocks, and downsample only on stages 2..4.
  auto r18 = models::resnet18()->state_dict();
  EXPECT_EQ(r18.size(), 122u);  // len(torchvision.models.resnet18().state_dict())
  EXPECT_TRUE(r18.count("layer2.0.downsample.0.weight") && !r18.count("layer1.0.downsample.0.weight"));
  EXPECT_TRUE(r18.count("layer4.1.bn2.running_var") && !r18.count("layer4.1.conv3.weight"));
}

TEST(ResNet, ForwardShapesAndInitialization) {
  nb::manual_seed(test_seed());
  nb::Tensor x = random_input({2, 3, 64, 64}, test_seed(), nb::kFloat32);
  auto r18 = models::resnet18({.num_classes = 7});
  EXPECT_EQ(r18->forward(x).sizes(), (nb::Shape{2, 7}));
  models::ResNet* r50 = &shared_resnet50();
  nb::Tensor logits = r50->forward(x);
  EXPECT_EQ(logits.sizes(), (nb::Shape{2, 1000}));
  EXPECT_EQ(r50->features(x).sizes(), (nb::Shape{2, 2048}));
  logits.sum().backward();
  EXPECT_TRUE(r50->conv1.weight.grad().defined());
  EXPECT_EQ(r50->layer1.size(), 3u);
  // torchvision init: He normal fan_out for convs; BN 1 / 0.
  auto& c = r50->layer3[0];
  auto* block = dynamic_cast<models::Bottleneck*>(&c);
  ASSERT_NE(block, nullptr);
  nb::Tensor w = block->conv2.weight.to(nb::kFloat64);
  double std = std::sqrt((w * w).mean().item<double>());
  EXPECT_NEAR(std / std::sqrt(2.0 / (256 * 9)), 1.0, 0.05);
  EXPECT_EQ(nb::min(block->bn3.weight).item<float>(), 1.0f);
  EXPECT_EQ(nb::max(block->bn3.bias.abs()).item<float>(), 0.0f);
}

TEST(ResNet, ZeroInitResidualCifarStemAndChannels) {
  auto model = models::resnet18(
      {.num_classes = 10, .zero_init_residual = true, .in_channels = 1, .small_input_stem = true});
  EXPECT_EQ(model->conv1.weight.sizes(), (nb::Shape{64, 1, 3, 3}));
  for (const auto& [n, p] : model->named_parameters()) {
    bool last_bn = n.find(".bn2.weight") != std::string::npos;
    if (last_bn) {
      EXPECT_EQ(nb::max(p.abs()).item<float>(), 0.0f) << n;
    }
    if (n == "bn1.weight") {
      EXPECT_EQ(nb::min(p).item<float>(), 1.0f);
    }
  }
  // No max-pool and a stride-1 stem: a 16x16 input reaches layer4 at 2x2 (a 7x7 stem would give 1x1).
  nb::Tensor x = random_input({2, 1, 16, 16}, test_seed(), nb::kFloat32);
  nb::Tensor y = model->layer1(model->relu(model->bn1(model->conv1(x))));
  EXPECT_EQ(y.sizes(), (nb::Shape{2, 64, 16, 16}));
  EXPECT_EQ(model->forward(x).sizes(), (nb::Shape{2, 10}));
  // A one-block-per-stage bottleneck ResNet: the same code path as ResNet-50 at a third the size.
  models::ResNet r50(models::BlockKind::bottleneck, {1, 1, 1, 1}, {.zero_init_residual = true});
  auto* b = dynamic_cast<models::Bottleneck*>(&r50.layer2[0]);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(nb::max(b->bn3.weight.abs()).item<float>(), 0.0f);
  EXPECT_EQ(nb::min(b->bn2.weight).item<float>(), 1.0f);
  EXPECT_NABLA_ERROR(model->forward(random_input({1, 3, 16, 16}, test_seed(), nb::kFloat32)), "(N, 1, H, W)");
}

TEST(SmallCnn, ShapesAndNames) {
  models::SmallCnn model;
  nb::Tensor x = random_input({3, 1, 28, 28}, test_seed(), nb::kFloat32);
  EXPECT_EQ(model.forward(x).sizes(), (nb::Shape{3, 10}));
  EXPECT_EQ(model.fc1.weight.sizes(), (nb::Shape{128, 64 * 7 * 7}));
  std::vector<std::string> names;
  for (const auto& [n, _] : model.named_parameters()) names.push_back(n);
  EXPECT_EQ(names,
            (std::vector<std::string>{"conv1.weight", "bn1.weight", "bn1.bias", "conv2.weight", "bn2.weight",
                                      "bn2.bias", "fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"}));
  EXPECT_NABLA_ERROR(models::SmallCnn({.image_size = 10}), "multiple of 4");
}

// 64 images 1x12x12 of noise; the class is the quadrant that is brighter. Hand-written SGD with
// momentum (optim is a separate library) reaches 100% accuracy on the training set in eval mode.
TEST(SmallCnn, TrainsToFullAccuracyOnCpu) {
  nb::manual_seed(test_seed());
  const int64_t n = 64, side = 12, half = side / 2;
  std::vector<double> noise = nb::rand({n, 1, side, side}, {.dtype = nb::kFloat64}).to_vector<double>();
  std::vector<int64_t> labels(n);
  for (int64_t i = 0; i < n; ++i) {
    labels[i] = (i * 7 + i / 4) % 4;  // every class, in no simple order
    int64_t r0 = labels[i] / 2 * half, c0 = labels[i] % 2 * half;
    for (int64_t r = r0; r < r0 + half; ++r)
      for (int64_t c = c0; c < c0 + half; ++c) noise[(i * side + r) * side + c] += 0.5;
  }
  nb::Tensor x = nb::tensor<double>(noise, {n, 1, side, side}).to(nb::kFloat32);
  nb::Tensor y = nb::tensor<int64_t>(labels, {n});

  models::SmallCnn model({.image_size = side, .num_classes = 4});
  auto params = model.parameters();
  std::vector<nb::Tensor> velocity;
  for (const auto& p : params) velocity.push_back(nb::zeros_like(p));
  auto accuracy = [&] {
    nb::NoGradGuard no_grad;
    model.eval();
    nb::Tensor pred = nb::argmax(model.forward(x), 1);
    model.train();
    return nb::eq(pred, y).to(nb::kFloat64).mean().item<double>();
  };
  const double lr = 0.05, momentum = 0.9;
  int step = 0;
  double acc = 0;
  for (; step < 150 && acc < 1.0; ++step) {
    model.zero_grad();
    nb::Tensor loss = nb::cross_entropy(model.forward(x), y);
    loss.backward();
    {
      nb::NoGradGuard no_grad;
      for (size_t k = 0; k < params.size(); ++k) {
        velocity[k].mul_(momentum).add_(params[k].grad());
        params[k].sub_(velocity[k], lr);
      }
    }
    if (step % 5 == 4) acc = accuracy();
  }
  EXPECT_EQ(acc, 1.0) << "after " << step << " steps";
}

bool same_tokens(const nb::Tensor& a, const nb::Tensor& b) {
  return a.sizes() == b.sizes() && nb::eq(a, b).to(nb::kInt64).sum().item<int64_t>() == a.numel();
}

models::LlamaConfig tiny_llama() {
  return {.vocab = 24,
          .context = 16,
          .layers = 2,
          .heads = 4,
          .kv_heads = 2,
          .width = 16,
          .hidden = 24,
          .rope_base = 10000.0,
          .eps = 1e-5,
          .tie_embeddings = false};
}

// A tiny grouped-query LLaMA memorizes one batch: its backward (rotary, grouped-query attention's
// sums over each group, RMSNorm, SwiGLU) carries gradients to every parameter. Hand-written SGD with
// momentum.
TEST(Llama, GradientsReachEveryParameterAndATinyModelMemorizesABatch) {
  nb::manual_seed(test_seed());
  models::Llama model(tiny_llama());
  const nb::Tensor tokens = nb::randint(0, 24, {4, 13}, {.dtype = nb::kInt64});
  const nb::Tensor x = tokens.narrow(1, 0, 12), y = tokens.narrow(1, 1, 12);
  auto params = model.parameters();
  std::vector<nb::Tensor> velocity;
  for (const auto& p : params) velocity.push_back(nb::zeros_like(p));
  double first = 0, last = 0;
  for (int step = 0; step < 60; ++step) {
    model.zero_grad();
    nb::Tensor loss = model.loss(x, y);
    loss.backward();
    if (step == 0) {
      first = loss.item<double>();
      for (const auto& [name, p] : model.named_parameters()) {
        ASSERT_TRUE(p.grad().defined()) << name;
        EXPECT_GT(nb::max(nb::abs(p.grad())).item<double>(), 0.0) << name;
      }
    }
    last = loss.item<double>();
    nb::NoGradGuard no_grad;
    for (size_t k = 0; k < params.size(); ++k) {
      velocity[k].mul_(0.9).add_(params[k].grad());
      params[k].sub_(velocity[k], 0.05);
    }
  }
  EXPECT_LT(last, 0.5 * first) << "loss " << first << " -> " << last;
}

// The key/value cache gives the logits of a full pass, whether the positions come as a prompt,
// a chunk after it (the offset mask) or one at a time.
TEST(Llama, CachedLogitsEqualAFullPass) {
  nb::manual_seed(test_seed());
  models::Llama model(tiny_llama());
  model.to(nb::kFloat64);
  const nb::Tensor tokens = nb::randint(0, 24, {2, 9}, {.dtype = nb::kInt64});
  nb::NoGradGuard no_grad;  // the cache is for inference
  const nb::Tensor full = model.logits(tokens);
  models::LlamaCache cache;
  nb::TensorList parts;
  for (auto [start, length] : {std::pair{0, 4}, {4, 3}, {7, 1}, {8, 1}}) {
    parts.push_back(model.logits(tokens.narrow(1, start, length), cache));
  }
  EXPECT_EQ(cache.length, 9);
  EXPECT_TRUE(nabla::testing::all_close(nb::cat(parts, 1), full, 1e-12, 1e-12));
  EXPECT_THROW(model.logits(nb::zeros({2, 8}, {.dtype = nb::kInt64}), cache), nb::Error);  // 17 > 16
}

// The cache is allocated once, at its capacity (the model's context by default, or what
// generate fills), and written in place: its memory is what the config says, and a step moves
// no buffer. It refuses positions past its capacity and gradient mode.
TEST(Llama, TheCacheIsPreallocatedAtItsCapacity) {
  nb::manual_seed(test_seed());
  const models::LlamaConfig config = tiny_llama();
  models::Llama model(config);
  model.to(nb::kFloat64);
  const nb::Tensor tokens = nb::randint(0, 24, {3, 6}, {.dtype = nb::kInt64});
  models::LlamaCache cache;
  EXPECT_NABLA_ERROR(model.logits(tokens, cache), "run it under NoGradGuard");
  nb::NoGradGuard no_grad;
  models::LlamaCache small;
  small.capacity = 8;
  model.logits(tokens, small);
  const int64_t D = config.width / config.heads;
  ASSERT_EQ(small.keys.size(), static_cast<size_t>(config.layers));
  EXPECT_EQ(small.keys[0].sizes(), (nb::Shape{3, config.kv_heads, 8, D}));
  EXPECT_EQ(small.bytes(), 2 * config.layers * 3 * config.kv_heads * 8 * D * 8);
  const void* before = small.keys[1].data_ptr();
  model.logits(tokens.narrow(1, 0, 2), small);
  EXPECT_EQ(small.keys[1].data_ptr(), before) << "a step must write into the buffer, not replace it";
  EXPECT_EQ(small.length, 8);
  EXPECT_NABLA_ERROR(model.logits(tokens.narrow(1, 0, 1), small), "capacity of 8");
  models::LlamaCache fresh;
  model.logits(tokens, fresh);
  EXPECT_EQ(fresh.keys[0].size(2), config.context);  // the default: the model's context
}

TEST(Llama, GenerationWithTheCacheEqualsRecomputingThePrefix) {
  nb::manual_seed(test_seed());
  models::Llama model(tiny_llama());
  model.to(nb::kFloat64);
  const nb::Tensor prompt = nb::randint(0, 24, {3, 5}, {.dtype = nb::kInt64});
  const nb::Tensor cached = model.generate(prompt, {.max_new_tokens = 7});
  ASSERT_EQ(cached.sizes(), (nb::Shape{3, 12}));
  nb::Tensor seq = prompt;
  {
    nb::NoGradGuard no_grad;
    for (int i = 0; i < 7; ++i) {
      const nb::Tensor next = nb::argmax(model.logits(seq).select(1, -1), -1, /*keepdim=*/true);
      seq = nb::cat({seq, next}, 1);
    }
  }
  EXPECT_TRUE(same_tokens(cached, seq));

  // top_k = 1 is greedy whatever the temperature; sampling follows its generator.
  EXPECT_TRUE(
      same_tokens(model.generate(prompt, {.max_new_tokens = 7, .temperature = 0.7, .top_k = 1}), seq));
  nb::Generator a(5), b(5);
  const nb::Tensor first =
      model.generate(prompt, {.max_new_tokens = 7, .temperature = 1.0, .top_k = 8, .generator = &a});
  const nb::Tensor again =
      model.generate(prompt, {.max_new_tokens = 7, .temperature = 1.0, .top_k = 8, .generator = &b});
  EXPECT_TRUE(same_tokens(first, again));
  EXPECT_THROW(model.generate(prompt, {.max_new_tokens = 2, .temperature = -1.0}), nb::Error);
  EXPECT_THROW(model.generate(prompt, {.max_new_tokens = 2, .temperature = 1.0, .top_p = 0.0}), nb::Error);
}

// decode_step, whose position is a tensor and whose attention spans the cache's whole capacity
// (the later positions masked), gives the logits of the cached one-token step at every
// position; generate's fixed-shape steps (.cuda_graph, eager on the CPU) give its tokens, greedy
// and sampled from one seed.
TEST(Llama, FixedShapeDecodeStepsEqualTheCachedSteps) {
  nb::manual_seed(test_seed());
  models::Llama model(tiny_llama());
  model.to(nb::kFloat64);
  const nb::Tensor tokens = nb::randint(0, 24, {2, 10}, {.dtype = nb::kInt64});
  nb::NoGradGuard no_grad;
  models::LlamaCache growing, fixed;
  growing.capacity = fixed.capacity = 12;
  model.logits(tokens.narrow(1, 0, 4), growing);
  model.logits(tokens.narrow(1, 0, 4), fixed);
  // Stale values in the unwritten slots must not matter: the mask hides them.
  for (auto& buffer : fixed.keys) buffer.narrow(2, 4, 8).fill_(1e3);
  for (auto& buffer : fixed.values) buffer.narrow(2, 4, 8).fill_(-7.0);
  nb::Tensor position = nb::full({1}, 4.0, {.dtype = nb::kInt64});
  for (int64_t t = 4; t < 10; ++t) {
    const nb::Tensor token = tokens.narrow(1, t, 1);
    const nb::Tensor expected = model.logits(token, growing).select(1, 0);
    EXPECT_TRUE(nabla::testing::all_close(model.decode_step(token, position, fixed), expected, 1e-12, 1e-12))
        << "position " << t;
    position.add_(1.0);
  }
  EXPECT_NABLA_ERROR(model.decode_step(tokens.narrow(1, 0, 2), position, fixed), "(batch, 1)");
  EXPECT_NABLA_ERROR(
      model.decode_step(tokens.narrow(1, 0, 1), nb::full({2}, 1.0, {.dtype = nb::kInt64}), fixed),
      "1-element int64");
  models::LlamaCache empty;
  EXPECT_NABLA_ERROR(model.decode_step(tokens.narrow(1, 0, 1), position, empty), "filled by a prompt");

  const nb::Tensor prompt = tokens.narrow(1, 0, 5);
  EXPECT_TRUE(same_tokens(model.generate(prompt, {.max_new_tokens = 6, .cuda_graph = true}),
                          model.generate(prompt, {.max_new_tokens = 6})));
  nb::Generator a(3), b(3);
  EXPECT_TRUE(same_tokens(
      model.generate(
          prompt,
          {.max_new_tokens = 6, .temperature = 1.0, .top_p = 0.9, .generator = &a, .cuda_graph = true}),
      model.generate(prompt, {.max_new_tokens = 6, .temperature = 1.0, .top_p = 0.9, .generator = &b})));
  EXPECT_EQ(model.generate(prompt, {.max_new_tokens = 1, .cuda_graph = true}).size(1), 6);
}

// Nucleus sampling keeps the fewest most likely tokens whose mass reaches top_p: a tiny top_p
// keeps only the most likely (greedy), and every sampled token at top_p = 0.5 is in the set
// computed here by sorting the probabilities on the host.
TEST(Llama, TopPSamplesOnlyFromTheNucleus) {
  nb::manual_seed(test_seed());
  models::Llama model(tiny_llama());
  model.to(nb::kFloat64);
  const nb::Tensor prompt = nb::randint(0, 24, {4, 5}, {.dtype = nb::kInt64});
  const nb::Tensor greedy = model.generate(prompt, {.max_new_tokens = 4});
  EXPECT_TRUE(
      same_tokens(model.generate(prompt, {.max_new_tokens = 4, .temperature = 1.0, .top_p = 1e-9}), greedy));
  nb::NoGradGuard no_grad;
  const nb::Tensor probs = nb::softmax(model.logits(prompt).select(1, -1), -1);  // (4, 24)
  nb::Generator gen(11);
  for (int draw = 0; draw < 20; ++draw) {
    const nb::Tensor out =
        model.generate(prompt, {.max_new_tokens = 1, .temperature = 1.0, .top_p = 0.5, .generator = &gen});
    for (int64_t b = 0; b < 4; ++b) {
      std::vector<double> p = probs.select(0, b).to_vector<double>();
      const int64_t token = out.select(0, b).select(0, 5).item<int64_t>();
      // The token's probability must be among the largest whose preceding mass is < 0.5.
      double before = 0;
      for (double q : p) before += q > p[static_cast<size_t>(token)] ? q : 0.0;
      EXPECT_LT(before, 0.5) << "row " << b << " token " << token;
    }
  }
}
