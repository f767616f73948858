// nn::models::GPT2 against a GPT-2 written by hand in PyTorch with Hugging Face's keys
// (tests/interop/torch_gpt2_model.py, run by torch_gpt2_logits.py on Debian's torch, float32 on
// the CPU): the state dict, with the older files' attn.bias / attn.masked_bias buffers, loads
// through load_hf_state_dict, the tie between lm_head and wte holds after the load, and the
// logits agree within 1e-4. The transformers package is not installed here, so the hand-written
// model is the independent reference.
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

TEST(InteropGpt2, HuggingFaceStateDictLoadsAndLogitsMatchPyTorch) {
  if (!debian_torch_available()) GTEST_SKIP() << "/usr/bin/python3 cannot import torch";
  const fs::path file = fs::temp_directory_path() / fmt::format("nabla_gpt2_{}.safetensors", ::getpid());
  const std::string command =
      fmt::format("/usr/bin/python3 '{}' '{}' {}", source_file("tests/interop/torch_gpt2_logits.py").string(),
                  file.string(), test_seed() % 100000);
  ASSERT_EQ(std::system(command.c_str()), 0) << command;
  const nn::StateDict all = load_safetensors(file.string()).tensors;
  fs::remove(file);

  nn::StateDict state;
  for (const auto& [key, t] : all) {
    if (key.starts_with("state.")) state[key.substr(6)] = t;
  }
  ASSERT_TRUE(state.count("transformer.h.0.attn.bias")) << "the reference must carry the old buffers";
  ASSERT_TRUE(state.count("transformer.h.1.attn.masked_bias"));
  EXPECT_EQ(state.at("transformer.h.0.attn.c_attn.weight").sizes(), (Shape{32, 96})) << "Conv1D is (in, out)";

  nn::models::GPT2 model({.vocab = 97, .context = 24, .layers = 2, .heads = 4, .width = 32});
  const nn::LoadResult r = model.load_hf_state_dict(state);
  EXPECT_TRUE(r.missing_keys.empty() && r.unexpected_keys.empty());
  // Still one parameter under two names, holding the loaded values.
  EXPECT_TRUE(model.lm_head.weight.is_same(model.transformer.wte.weight));
  EXPECT_TRUE(all_close(model.lm_head.weight, state.at("lm_head.weight"), 0, 0));

  const Tensor logits = model.logits(all.at("tokens"));
  ASSERT_EQ(logits.sizes(), (Shape{3, 19, 97}));
  EXPECT_TRUE(all_close(logits, all.at("logits"), 1e-4, 1e-4));
  const double spread = max(abs(all.at("logits"))).item<double>();
  EXPECT_GT(spread, 0.1) << "the reference logits are too small to tell models apart";

  // Without the old buffers the file loads the same way; an unknown key is still an error.
  nn::StateDict plain = state;
  plain.erase("transformer.h.0.attn.bias");
  plain.erase("transformer.h.0.attn.masked_bias");
  model.load_hf_state_dict(plain);
  plain["transformer.h.0.attn.not_a_key"] = ones({1});
  EXPECT_THROW(model.load_hf_state_dict(plain), Error);
}

}  // namespace
}  // namespace nabla
