// nn::MultiheadAttention against Debian's PyTorch (torch.nn.MultiheadAttention, float64 on the
// CPU): torch_attention.py builds modules with random weights, runs forward and backward with
// causal, boolean, additive and key-padding masks in both batch layouts, and writes the state
// dicts, inputs and results to one safetensors file. Each state dict loads here strictly, under
// PyTorch's names, and the outputs and the gradients of every input and parameter must agree.
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

struct CaseSetup {
  const char* name;
  bool batch_first, self_attention, causal, bias;
};

// The entries of `all` under "<prefix>.", with the prefix taken off.
nn::StateDict under(const nn::StateDict& all, const std::string& prefix) {
  nn::StateDict out;
  for (const auto& [key, t] : all) {
    if (key.starts_with(prefix + ".")) out[key.substr(prefix.size() + 1)] = t;
  }
  return out;
}

TEST(InteropAttention, MultiheadAttentionMatchesPyTorch) {
  if (!debian_torch_available()) GTEST_SKIP() << "/usr/bin/python3 cannot import torch";
  const fs::path file = fs::temp_directory_path() / fmt::format("nabla_mha_{}.safetensors", ::getpid());
  const std::string command =
      fmt::format("/usr/bin/python3 '{}' '{}' {}", source_file("tests/interop/torch_attention.py").string(),
                  file.string(), test_seed() % 100000);
  ASSERT_EQ(std::system(command.c_str()), 0) << command;
  const nn::StateDict all = load_safetensors(file.string()).tensors;
  fs::remove(file);

  const CaseSetup cases[] = {{"self_causal", true, true, true, true},
                             {"cross_padding", false, false, false, true},
                             {"cross_bool_mask", true, false, false, false},
                             {"self_additive", false, true, false, true}};
  for (const CaseSetup& c : cases) {
    SCOPED_TRACE(c.name);
    const nn::StateDict io = under(all, c.name);
    nn::MultiheadAttention attn(
        {.embed_dim = 16, .num_heads = 4, .bias = c.bias, .batch_first = c.batch_first});
    attn.to(kFloat64);
    attn.load_state_dict(under(io, "state"));  // strict: PyTorch's names and layouts
    const Tensor q = io.at("in.query").detach().requires_grad_(true);
    Tensor k = q, v = q;
    if (!c.self_attention) {
      k = io.at("in.key").detach().requires_grad_(true);
      v = io.at("in.value").detach().requires_grad_(true);
    }
    nn::AttentionMasks masks{.causal = c.causal};
    if (io.count("mask.attn")) {
      const Tensor m = io.at("mask.attn");
      masks.attn_mask = m.dtype() == kUInt8 ? m.to(kBool) : m;
    }
    if (io.count("mask.padding")) masks.key_padding_mask = io.at("mask.padding").to(kBool);
    const Tensor y = attn.forward(q, k, v, masks);
    y.backward(io.at("in.grad"));
    EXPECT_TRUE(all_close(y, io.at("out"), 1e-10, 1e-12));
    EXPECT_TRUE(all_close(q.grad(), io.at("grad.query"), 1e-10, 1e-12)) << "query";
    if (!c.self_attention) {
      EXPECT_TRUE(all_close(k.grad(), io.at("grad.key"), 1e-10, 1e-12)) << "key";
      EXPECT_TRUE(all_close(v.grad(), io.at("grad.value"), 1e-10, 1e-12)) << "value";
    }
    for (const auto& [name, p] : attn.named_parameters()) {
      EXPECT_TRUE(all_close(p.grad(), io.at("grad." + name), 1e-10, 1e-12)) << name;
    }
  }
}

}  // namespace
}  // namespace nabla
