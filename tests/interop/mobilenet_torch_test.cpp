// nabla's mobilenet_v2, mobilenet_v3_large, mobilenet_v3_small and efficientnet_b0 against
// torchvision's, from torchvision's own random weights: torch_mobilenet.py writes a float64
// model's state dict (batch norms moved off their defaults), an input, the eval logits and one
// training step's loss, gradients and running statistics (dropout and stochastic depth 0). nabla
// loads the state dict with strict = true (every name and shape torchvision's), and must give the
// same logits, loss, every gradient and every buffer. The *OnCuda tests run nabla's side on the GPU
// (float64, so the tolerances stay), against the PyTorch of $NABLA_TORCH_PYTHON (2.11 on the GPU
// machine).
//
// Skips itself (with a message) only when the interpreter cannot import torch, or, on CUDA, when
// there is no GPU.
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "test_util.h"
#include "torch_python.h"

namespace nabla {
namespace {

using namespace testing;  // NOLINT: test helpers
namespace fs = std::filesystem;

// Runs the script for `arch`, loads its state dict into `model` (strict) and compares, running
// nabla's side on `device`.
void expect_matches_torchvision(const std::string& arch, nn::Module& model, int64_t parameters,
                                Device device = Device::cpu()) {
  SCOPED_TRACE(arch + " on " + device.str());
  const fs::path file = fs::temp_directory_path() / fmt::format("nabla_{}_{}.safetensors", arch, ::getpid());
  const std::string command = fmt::format("{} '{}' '{}' {} {}", torch_python(),
                                          source_file("tests/interop/torch_mobilenet.py").string(),
                                          file.string(), test_seed() % 100000, arch);
  ASSERT_EQ(std::system(command.c_str()), 0) << command;
  const nn::StateDict all = load_safetensors(file.string()).tensors;
  fs::remove(file);

  nn::StateDict state;
  for (const auto& [key, value] : all)
    if (key.rfind("state.", 0) == 0) state.emplace(key.substr(6), value);
  model.to(kFloat64);
  EXPECT_EQ(model.state_dict().size(), state.size());
  model.load_state_dict(state);  // strict
  model.to(device);
  // Every result comes back to the CPU for the comparisons.
  const auto host = [](const Tensor& t) { return t.to(Device::cpu()); };

  const Tensor x = all.at("input").to(device);
  model.eval();
  {
    NoGradGuard no_grad;
    EXPECT_TRUE(all_close(host(model.forward(x)), all.at("eval.output"), 1e-10, 1e-10)) << "eval logits";
  }
  model.train();
  const Tensor loss = cross_entropy(model.forward(x), all.at("labels").to(device));
  EXPECT_NEAR(loss.item<double>(), all.at("train.loss").item<double>(), 1e-10);
  loss.backward();
  int64_t grads = 0;
  for (const auto& [name, p] : model.named_parameters()) {
    // Against the tensor's scale: PyTorch's hardsigmoid backward multiplies by the float
    // constant 1.0f / 6 even in float64 (3e-8 relative), and gradients that are sums of
    // cancelling terms carry that into elements far smaller than their terms. A batch norm
    // followed by a convolution and another training batch norm has a bias gradient of zero up
    // to rounding (the next batch norm removes the shift), hence the floor under the scale.
    const Tensor want = all.at("grad." + name);
    const double error = max(abs(host(p.grad()) - want)).item<double>();
    const double scale = std::max(max(abs(want)).item<double>(), 1e-4);
    EXPECT_LT(error, (arch == "mobilenet_v2" ? 1e-9 : 1e-6) * scale) << name;
    ++grads;
  }
  EXPECT_EQ(grads, parameters) << "every parameter of torchvision's " << arch;
  for (const auto& [name, b] : model.named_buffers())
    EXPECT_TRUE(all_close(host(b), all.at("train." + name), 1e-10, 1e-10)) << name;
}

void expect_mobilenets_match(Device device) {
  expect_matches_torchvision("mobilenet_v2", *nn::models::mobilenet_v2({.num_classes = 10, .dropout = 0.0}),
                             158, device);
  expect_matches_torchvision("mobilenet_v3_large",
                             *nn::models::mobilenet_v3_large({.num_classes = 10, .dropout = 0.0}), 174,
                             device);
  expect_matches_torchvision("mobilenet_v3_small",
                             *nn::models::mobilenet_v3_small({.num_classes = 10, .dropout = 0.0}), 142,
                             device);
  expect_matches_torchvision(
      "efficientnet_b0",
      *nn::models::efficientnet_b0({.num_classes = 10, .dropout = 0.0, .stochastic_depth_prob = 0.0}), 213,
      device);
}

void expect_vit_matches(Device device) {
  // torchvision's VisionTransformer class at a small size (vit_b_16 is the same code at 224 / 16 /
  // 12 layers / 768): 2 layers, 4 heads, hidden 32, 8 x 8 patches of 32 x 32 images.
  nn::models::VisionTransformer vit({.image_size = 32,
                                     .patch_size = 8,
                                     .num_layers = 2,
                                     .num_heads = 4,
                                     .hidden_dim = 32,
                                     .mlp_dim = 64,
                                     .num_classes = 10});
  expect_matches_torchvision("vit_tiny", vit, 32, device);  // 4 outside the layers, 12 per layer, ln and head
}

TEST(InteropMobileNet, MobileNetsMatchTorchvision) {
  if (!torch_python_available()) GTEST_SKIP() << torch_python() << " cannot import torch and torchvision";
  expect_mobilenets_match(Device::cpu());
}

TEST(InteropMobileNet, MobileNetsMatchTorchvisionOnCuda) {
  if (!cuda::is_available()) GTEST_SKIP() << "no GPU";
  if (!torch_python_available()) GTEST_SKIP() << torch_python() << " cannot import torch and torchvision";
  expect_mobilenets_match(Device::cuda());
}

TEST(InteropVisionTransformer, VisionTransformerMatchesTorchvision) {
  if (!torch_python_available()) GTEST_SKIP() << torch_python() << " cannot import torch and torchvision";
  expect_vit_matches(Device::cpu());
}

TEST(InteropVisionTransformer, VisionTransformerMatchesTorchvisionOnCuda) {
  if (!cuda::is_available()) GTEST_SKIP() << "no GPU";
  if (!torch_python_available()) GTEST_SKIP() << torch_python() << " cannot import torch and torchvision";
  expect_vit_matches(Device::cuda());
}

}  // namespace
}  // namespace nabla
