// The activation modules of vision models (LeakyReLU, ELU, Hardswish, Hardsigmoid, Softplus,
// Mish) against Debian's PyTorch: torch_activations.py runs each torch.nn module, with the same
// parameters, on random float64 inputs spread over every branch of its function and writes the
// inputs, outputs and input gradients; here the nn modules must give the same values and
// gradients. Also channels_last and float32 against float64.
//
// Skips itself (with a message) only when /usr/bin/python3 cannot import torch.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>

#include "test_util.h"
#include "torch_python.h"

namespace nabla {
namespace {

using namespace testing;  // NOLINT: test helpers
namespace fs = std::filesystem;

TEST(InteropActivations, ModulesMatchPyTorch) {
  if (!debian_torch_available()) GTEST_SKIP() << "/usr/bin/python3 cannot import torch";
  const fs::path file = fs::temp_directory_path() / fmt::format("nabla_act_{}.safetensors", ::getpid());
  const std::string command =
      fmt::format("/usr/bin/python3 '{}' '{}' {}", source_file("tests/interop/torch_activations.py").string(),
                  file.string(), test_seed() % 100000);
  ASSERT_EQ(std::system(command.c_str()), 0) << command;
  const nn::StateDict all = load_safetensors(file.string()).tensors;
  fs::remove(file);

  const std::pair<const char*, std::function<std::shared_ptr<nn::Module>()>> cases[] = {
      {"leaky_relu", [] { return std::make_shared<nn::LeakyReLU>(0.2); }},
      {"leaky_relu_default", [] { return std::make_shared<nn::LeakyReLU>(); }},
      {"elu", [] { return std::make_shared<nn::ELU>(1.3); }},
      {"hardswish", [] { return std::make_shared<nn::Hardswish>(); }},
      {"hardsigmoid", [] { return std::make_shared<nn::Hardsigmoid>(); }},
      {"softplus", [] { return std::make_shared<nn::Softplus>(2.0, 3.0); }},
      {"softplus_default", [] { return std::make_shared<nn::Softplus>(); }},
      {"mish", [] { return std::make_shared<nn::Mish>(); }},
  };
  for (const auto& [name, make] : cases) {
    SCOPED_TRACE(name);
    const std::string key(name);
    const std::shared_ptr<nn::Module> module = make();
    EXPECT_TRUE(module->parameters().empty());
    const Tensor x = all.at(key + ".x").detach().requires_grad_(true);
    const Tensor y = module->forward(x);
    y.backward(all.at(key + ".grad_out"));
    EXPECT_TRUE(all_close(y, all.at(key + ".y"), 1e-12, 1e-12));
    // PyTorch's hardsigmoid backward multiplies by 1.0f / 6.0f, a float constant even in float64
    // (relative 3e-8 from 1/6); nabla divides by 6.
    const double grad_tol = key == "hardsigmoid" ? 1e-7 : 1e-12;
    EXPECT_TRUE(all_close(x.grad(), all.at(key + ".grad_x"), grad_tol, grad_tol));
    // float32 channels_last: the layout kept, the values within float32 rounding.
    const Tensor x32 = all.at(key + ".x").to(kFloat32).contiguous(MemoryFormat::ChannelsLast);
    const Tensor y32 = module->forward(x32);
    EXPECT_TRUE(y32.is_contiguous(MemoryFormat::ChannelsLast));
    EXPECT_TRUE(all_close(y32.to(kFloat64), all.at(key + ".y"), 1e-5, 1e-5));
  }
}

TEST(InteropActivations, BadArgumentsNameTheProblem) {
  EXPECT_NABLA_ERROR(softplus(random_input({3}, test_seed()), 0.0), "beta must be non-zero");
}

}  // namespace
}  // namespace nabla
