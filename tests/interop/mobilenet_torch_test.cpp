// nabla's mobilenet_v2 against torchvision's, from torchvision's own random weights:
// torch_mobilenet.py writes a float64 model's state dict (batch norms moved off their
// defaults), an input, the eval logits and one training step's loss, gradients and running
// statistics (dropout 0). nabla loads the state dict with strict = true (every name and shape
// torchvision's), and must give the same logits, loss, every gradient and every buffer.
//
// Skips itself (with a message) only when /usr/bin/python3 cannot import torch.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "test_util.h"
#include "torch_python.h"

namespace nabla {
namespace {

using namespace testing;  // NOLINT: test helpers
namespace fs = std::filesystem;

TEST(InteropMobileNet, MobileNetV2MatchesTorchvision) {
  if (!debian_torch_available()) GTEST_SKIP() << "/usr/bin/python3 cannot import torch";
  const fs::path file = fs::temp_directory_path() / fmt::format("nabla_mobilenet_{}.safetensors", ::getpid());
  const std::string command =
      fmt::format("/usr/bin/python3 '{}' '{}' {}", source_file("tests/interop/torch_mobilenet.py").string(),
                  file.string(), test_seed() % 100000);
  ASSERT_EQ(std::system(command.c_str()), 0) << command;
  const nn::StateDict all = load_safetensors(file.string()).tensors;
  fs::remove(file);

  nn::StateDict state;
  for (const auto& [key, value] : all)
    if (key.rfind("state.", 0) == 0) state.emplace(key.substr(6), value);
  auto model = nn::models::mobilenet_v2({.num_classes = 10, .dropout = 0.0});
  model->to(kFloat64);
  EXPECT_EQ(model->state_dict().size(), state.size());
  model->load_state_dict(state);  // strict

  const Tensor x = all.at("input");
  model->eval();
  {
    NoGradGuard no_grad;
    EXPECT_TRUE(all_close(model->forward(x), all.at("eval.output"), 1e-10, 1e-10)) << "eval logits";
  }
  model->train();
  const Tensor loss = cross_entropy(model->forward(x), all.at("labels"));
  EXPECT_NEAR(loss.item<double>(), all.at("train.loss").item<double>(), 1e-10);
  loss.backward();
  int grads = 0;
  for (const auto& [name, p] : model->named_parameters()) {
    EXPECT_TRUE(all_close(p.grad(), all.at("grad." + name), 1e-8, 1e-10)) << name;
    ++grads;
  }
  EXPECT_EQ(grads, 158);  // every parameter of torchvision's mobilenet_v2
  for (const auto& [name, b] : model->named_buffers())
    EXPECT_TRUE(all_close(b, all.at("train." + name), 1e-10, 1e-10)) << name;
}

}  // namespace
}  // namespace nabla
