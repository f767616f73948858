// nn::models::Llama against a LLaMA written by hand in PyTorch with Hugging Face's keys and
// formulas (tests/interop/torch_llama_model.py, run by torch_llama_logits.py on Debian's torch,
// float64 on the CPU): the state dict, with the rotary_emb.inv_freq buffers older files carry,
// loads through load_hf_state_dict, and the logits of a grouped-query model (4 query heads, 2
// key/value heads) agree. The transformers package is not installed here, so the hand-written
// model is the independent reference.
//
// Skips itself (with a message) only when /usr/bin/python3 cannot import torch; the GPU case,
// without a GPU or a PyTorch with CUDA at $NABLA_TORCH_PYTHON.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "parity_util.h"
#include "torch_python.h"

namespace nabla {
namespace {

using namespace testing;  // NOLINT: test helpers
namespace fs = std::filesystem;

const nn::models::LlamaConfig kSmall{.vocab = 89,
                                     .context = 32,
                                     .layers = 2,
                                     .heads = 4,
                                     .kv_heads = 2,
                                     .width = 32,
                                     .hidden = 48,
                                     .rope_base = 500.0,
                                     .eps = 1e-5,
                                     .tie_embeddings = false};

// The reference's file: its state dict ("state.*"), tokens and float64 logits.
// With `folder`, the reference also writes its Hugging Face folder there (config.json, shards).
nn::StateDict reference(const char* variant, const std::string& folder = "",
                        const std::string& python = "/usr/bin/python3") {
  const fs::path file = fs::temp_directory_path() / fmt::format("nabla_llama_{}.safetensors", ::getpid());
  const std::string command = fmt::format("{} '{}' '{}' {} {} {}", python,
                                          source_file("tests/interop/torch_llama_logits.py").string(),
                                          file.string(), test_seed() % 100000, variant, folder);
  EXPECT_EQ(std::system(command.c_str()), 0) << command;
  nn::StateDict all = load_safetensors(file.string()).tensors;
  fs::remove(file);
  return all;
}

nn::StateDict state_of(const nn::StateDict& all) {
  nn::StateDict state;
  for (const auto& [key, t] : all) {
    if (key.starts_with("state.")) state[key.substr(6)] = t;
  }
  return state;
}

// Llama 3's rope_scaling: the Python side rescales the frequencies by wavelength bands (its own
// code), nabla through RotaryCache; head size 8 over an original context of 64 puts one frequency
// in the kept band, one in the blended band and two in the slowed band.
TEST(InteropLlama, Llama3RopeScalingMatchesPyTorch) {
  if (!debian_torch_available()) GTEST_SKIP() << "/usr/bin/python3 cannot import torch";
  const nn::StateDict all = reference("llama3");
  nn::models::LlamaConfig config = kSmall;
  config.rope_scaling = RotaryScaling{
      .factor = 8.0, .low_freq_factor = 1.0, .high_freq_factor = 4.0, .original_max_positions = 64};
  nn::models::Llama model(config);
  model.to(kFloat64);
  model.load_hf_state_dict(state_of(all));
  EXPECT_TRUE(all_close(model.logits(all.at("tokens")), all.at("logits"), 1e-9, 1e-9));
  // Without the scaling the logits differ: the test sees the rescaled frequencies.
  nn::models::Llama plain(kSmall);
  plain.to(kFloat64);
  plain.load_hf_state_dict(state_of(all));
  EXPECT_FALSE(all_close(plain.logits(all.at("tokens")), all.at("logits"), 1e-6, 1e-6));
}

// A Hugging Face folder written by the Python side (its config.json, two float64 shards and their
// index) builds the model through load_hf_llama: config, Llama 3 scaling and weights.
TEST(InteropLlama, HuggingFaceFolderLoadsThroughItsConfigAndShards) {
  if (!debian_torch_available()) GTEST_SKIP() << "/usr/bin/python3 cannot import torch";
  const fs::path folder = fs::temp_directory_path() / fmt::format("nabla_llama_folder_{}", ::getpid());
  fs::create_directories(folder);
  const nn::StateDict all = reference("llama3", folder.string());
  const auto model = nn::models::load_hf_llama(folder.string(), Device::cpu(), kFloat64);
  const auto in_float32 = nn::models::load_hf_llama(folder.string());
  fs::remove_all(folder);
  EXPECT_EQ(in_float32->lm_head.weight.dtype(), kFloat32);
  EXPECT_LT(max(abs(in_float32->logits(all.at("tokens")).to(kFloat64) - all.at("logits"))).item<double>(),
            1e-4);
  EXPECT_EQ(model->config.kv_heads, 2);
  ASSERT_TRUE(model->config.rope_scaling.has_value());
  EXPECT_EQ(model->config.rope_scaling->original_max_positions, 64);
  EXPECT_TRUE(all_close(model->logits(all.at("tokens")), all.at("logits"), 1e-9, 1e-9));
}

TEST(InteropLlama, HuggingFaceStateDictLoadsAndLogitsMatchPyTorch) {
  if (!debian_torch_available()) GTEST_SKIP() << "/usr/bin/python3 cannot import torch";
  const nn::StateDict all = reference("plain");
  const nn::StateDict state = state_of(all);
  ASSERT_TRUE(state.count("model.layers.1.self_attn.rotary_emb.inv_freq")) << "the reference must carry them";
  EXPECT_EQ(state.at("model.layers.0.self_attn.k_proj.weight").sizes(), (Shape{16, 32})) << "2 of 4 heads";

  nn::models::Llama model(kSmall);
  model.to(kFloat64);
  const nn::LoadResult r = model.load_hf_state_dict(state);
  EXPECT_TRUE(r.missing_keys.empty() && r.unexpected_keys.empty());

  const Tensor logits = model.logits(all.at("tokens"));
  ASSERT_EQ(logits.sizes(), (Shape{3, 17, 89}));
  EXPECT_TRUE(all_close(logits, all.at("logits"), 1e-9, 1e-9));
  EXPECT_GT(max(abs(all.at("logits"))).item<double>(), 0.1) << "the reference logits are too small";

  // Strict: an unknown key is an error, and a missing one is reported.
  nn::StateDict extra = state;
  extra["model.layers.0.self_attn.not_a_key"] = ones({1});
  EXPECT_THROW(model.load_hf_state_dict(extra), Error);
}

// On the GPU, in float32 with TF32 off, against PyTorch's own float32 GPU logits on the same
// weights ($NABLA_TORCH_PYTHON: PyTorch 2.11 on the GPU machine): within 1e-5 of their scale.
TEST(InteropLlama, CudaFloat32LogitsMatchPyTorchOnTheGpu) {
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  if (std::system((torch_python() + " -c 'import torch; assert torch.cuda.is_available()' >/dev/null 2>&1")
                      .c_str()) != 0)
    GTEST_SKIP() << torch_python() << " has no PyTorch with CUDA";
  const nn::StateDict all = reference("cuda", "", torch_python());
  nn::models::Llama model(kSmall);
  model.load_hf_state_dict(state_of(all));  // float64 values into float32 parameters
  model.to(Device::cuda(0));
  Fp32Exact exact;
  NoGradGuard no_grad;
  const Tensor got = model.logits(all.at("tokens").to(Device::cuda(0))).to(Device::cpu(), kFloat64);
  const Tensor& want = all.at("logits32");
  const double scale = max(abs(want)).item<double>();
  EXPECT_LT(max(abs(got - want)).item<double>(), 1e-5 * scale);
  EXPECT_LT(max(abs(got - all.at("logits"))).item<double>(), 1e-5 * scale) << "against float64 too";
}

TEST(InteropLlama, TiedEmbeddingsShareOneParameterAndMayOmitTheHead) {
  nn::models::LlamaConfig tied = kSmall;
  tied.tie_embeddings = true;
  nn::models::Llama model(tied);
  EXPECT_TRUE(model.lm_head.weight.is_same(model.model.embed_tokens.weight));
  nn::StateDict state = model.state_dict();
  state.erase("lm_head.weight");
  const Tensor embedding = randn({89, 32});
  state["model.embed_tokens.weight"] = embedding;
  const nn::LoadResult r = model.load_hf_state_dict(state);
  EXPECT_TRUE(r.missing_keys.empty() && r.unexpected_keys.empty());
  EXPECT_TRUE(all_close(model.lm_head.weight, embedding, 0, 0));
}

TEST(InteropLlama, BadShapesAreRefusedWithTheReason) {
  nn::models::LlamaConfig bad = kSmall;
  bad.kv_heads = 3;
  try {
    nn::models::Llama model(bad);
    FAIL() << "4 heads over 3 key/value heads";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("kv_heads 3"), std::string::npos) << e.what();
  }
  nn::models::Llama model(kSmall);
  EXPECT_THROW(model.logits(zeros({2, 33}, {.dtype = kInt64})), Error);  // past the context
}

}  // namespace
}  // namespace nabla
