// Hugging Face LLaMA folders: config.json read into a LlamaConfig (defaults, Llama 3's
// rope_scaling, and an error naming the field for everything nabla's Llama cannot be), and
// checkpoints split over shards behind model.safetensors.index.json (load_safetensors_checkpoint):
// a model saved as two shards loads back to the same logits; a missing shard, a key missing from
// its shard, a bad index and a wrongly shaped tensor are named. (The same folder made from a
// PyTorch model: tests/interop/llama_torch_test.cpp.)
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "fuzz/hf_config_fuzz_body.h"
#include "fuzz/mutate.h"
#include "test_util.h"

namespace nb = nabla;
namespace models = nabla::nn::models;
namespace fs = std::filesystem;
using nabla::testing::test_seed;

namespace {

const char* kConfig = R"({
  "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu",
  "vocab_size": 50, "hidden_size": 32, "intermediate_size": 40, "num_hidden_layers": 2,
  "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 64,
  "rms_norm_eps": 1e-05, "rope_theta": 500000.0, "tie_word_embeddings": false, "head_dim": 8,
  "rope_scaling": {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
                   "high_freq_factor": 4.0, "original_max_position_embeddings": 16},
  "torch_dtype": "bfloat16", "attention_bias": false
})";

// `base` (kConfig) with one field replaced (or removed, with value ""), as text.
std::string with(const std::string& field, const std::string& value, const std::string& base = kConfig) {
  std::string text = base;
  const std::string key = "\"" + field + "\": ";
  const size_t at = text.find(key);
  if (at == std::string::npos) return text.substr(0, text.rfind('}')) + ", " + key + value + "}";
  size_t end = at + key.size();
  int depth = 0;
  for (; end < text.size(); ++end) {
    if (text[end] == '{') ++depth;
    if (text[end] == '}' && depth-- == 0) break;
    if (text[end] == ',' && depth == 0) break;
  }
  if (value.empty()) return text.substr(0, at) + text.substr(end + 1);
  return text.substr(0, at) + key + value + text.substr(end);
}

void write(const fs::path& file, const std::string& text) {
  std::ofstream(file) << text;
}

TEST(LlamaHf, ConfigFieldsAndDefaults) {
  const models::LlamaConfig c = models::llama_config_from_json(kConfig);
  EXPECT_EQ(c.vocab, 50);
  EXPECT_EQ(c.width, 32);
  EXPECT_EQ(c.hidden, 40);
  EXPECT_EQ(c.layers, 2);
  EXPECT_EQ(c.heads, 4);
  EXPECT_EQ(c.kv_heads, 2);
  EXPECT_EQ(c.context, 64);
  EXPECT_EQ(c.eps, 1e-5);
  EXPECT_EQ(c.rope_base, 500000.0);
  EXPECT_FALSE(c.tie_embeddings);
  ASSERT_TRUE(c.rope_scaling.has_value());
  EXPECT_EQ(c.rope_scaling->factor, 32.0);
  EXPECT_EQ(c.rope_scaling->original_max_positions, 16);
  // Defaults: kv heads = heads, no scaling, Hugging Face's eps and theta.
  const models::LlamaConfig d = models::llama_config_from_json(
      R"({"vocab_size": 10, "hidden_size": 16, "intermediate_size": 8, "num_hidden_layers": 1,
          "num_attention_heads": 2, "rope_scaling": null})");
  EXPECT_EQ(d.kv_heads, 2);
  EXPECT_EQ(d.context, 2048);
  EXPECT_EQ(d.eps, 1e-6);
  EXPECT_EQ(d.rope_base, 10000.0);
  EXPECT_FALSE(d.rope_scaling.has_value());
  // transformers 5: rope_theta and the scaling in rope_parameters; "default" is no scaling.
  const models::LlamaConfig e = models::llama_config_from_json(
      with("rope_parameters",
           R"({"rope_type": "llama3", "rope_theta": 250000.0, "factor": 16.0, "low_freq_factor": 1.0,
               "high_freq_factor": 4.0, "original_max_position_embeddings": 32})",
           with("rope_scaling", "")));
  EXPECT_EQ(e.rope_base, 250000.0);
  ASSERT_TRUE(e.rope_scaling.has_value());
  EXPECT_EQ(e.rope_scaling->factor, 16.0);
  EXPECT_FALSE(models::llama_config_from_json(with("rope_scaling", R"({"rope_type": "default"})"))
                   .rope_scaling.has_value());
}

TEST(LlamaHf, ConfigErrorsNameTheField) {
  const auto fails = [](const std::string& text, const char* what) {
    EXPECT_NABLA_ERROR(models::llama_config_from_json(text, "cfg.json"), "cfg.json", what);
  };
  fails(with("num_key_value_heads", "3"),
        "num_attention_heads 4 must be a multiple of num_key_value_heads 3");
  fails(with("hidden_size", "30"), "hidden_size 30 must be a multiple of num_attention_heads 4");
  fails(with("vocab_size", ""), "\"vocab_size\" is missing");
  fails(with("vocab_size", "\"fifty\""), "\"vocab_size\" must be an integer");
  fails(with("head_dim", "16"), "head_dim 16 differs");
  fails(with("attention_bias", "true"), "no biases");
  fails(with("hidden_act", "\"gelu\""), "hidden_act \"gelu\"");
  fails(with("rope_scaling", R"({"rope_type": "yarn", "factor": 4.0})"),
        "rope_type \"yarn\" is not supported");
  fails(with("rope_scaling", R"({"type": "llama3", "factor": 4.0})"), "\"low_freq_factor\" is missing");
  fails(with("rms_norm_eps", "-1e-6"), "rms_norm_eps must be a positive number");
  fails(with("rope_theta", "0"), "base");
  fails(with("rope_scaling",
             R"({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 4.0, "high_freq_factor": 1.0,
"original_max_position_embeddings": 8192})"),
        "high_freq_factor");
  fails(with("hidden_act", "[\"\xff\xfe\"]"), "not JSON");  // bytes that are not UTF-8
  fails("{\"vocab_size\": ", "not JSON");
  fails("[1, 2]", "expected a JSON object");
}

struct Folder {
  fs::path dir = fs::temp_directory_path() / fmt::format("nabla_llama_hf_{}_{}", ::getpid(), test_seed());
  Folder() { fs::create_directories(dir); }
  ~Folder() { fs::remove_all(dir); }
};

// Writes the model's state dict as two shards and their index, the way Hugging Face splits one.
void save_sharded(const nb::nn::StateDict& state, const fs::path& dir) {
  std::map<std::string, nb::Tensor> first, second;
  std::string map;
  for (const auto& [key, t] : state) {
    const bool in_first = key.find("layers.1.") == std::string::npos && key != "lm_head.weight";
    (in_first ? first : second)[key] = t;
    map += fmt::format("{}\"{}\": \"{}\"", map.empty() ? "" : ", ", key,
                       in_first ? "model-00001-of-00002.safetensors" : "model-00002-of-00002.safetensors");
  }
  nb::save_safetensors((dir / "model-00001-of-00002.safetensors").string(), first);
  nb::save_safetensors((dir / "model-00002-of-00002.safetensors").string(), second);
  write(dir / "model.safetensors.index.json",
        R"({"metadata": {"total_size": 1}, "weight_map": {)" + map + "}}");
}

TEST(LlamaHf, ShardedFolderLoadsToTheSameLogits) {
  Folder f;
  nb::manual_seed(test_seed());
  models::Llama original(models::llama_config_from_json(kConfig));
  write(f.dir / "config.json", kConfig);
  save_sharded(original.state_dict(), f.dir);
  const auto loaded = models::load_hf_llama(f.dir.string());
  const nb::Tensor tokens = nb::randint(0, 50, {2, 20}, {.dtype = nb::kInt64});
  nb::NoGradGuard no_grad;
  EXPECT_TRUE(nabla::testing::all_close(loaded->logits(tokens), original.logits(tokens), 0, 0));
  ASSERT_TRUE(loaded->config.rope_scaling.has_value());
}

TEST(LlamaHf, CheckpointErrorsNameTheFileAndKey) {
  Folder f;
  nb::manual_seed(test_seed());
  models::Llama original(models::llama_config_from_json(kConfig));
  write(f.dir / "config.json", kConfig);
  nb::nn::StateDict state = original.state_dict();
  save_sharded(state, f.dir);
  // A key the index names that its shard does not hold.
  std::map<std::string, nb::Tensor> short_shard;
  for (const auto& [k, t] : state) {
    if (k.find("layers.1.") != std::string::npos && k != "model.layers.1.mlp.up_proj.weight")
      short_shard[k] = t;
  }
  short_shard["lm_head.weight"] = state.at("lm_head.weight");
  nb::save_safetensors((f.dir / "model-00002-of-00002.safetensors").string(), short_shard);
  EXPECT_NABLA_ERROR(models::load_hf_llama(f.dir.string()), "model-00002-of-00002.safetensors",
                     "model.layers.1.mlp.up_proj.weight");
  // A shard that is not there.
  fs::remove(f.dir / "model-00002-of-00002.safetensors");
  EXPECT_NABLA_ERROR(models::load_hf_llama(f.dir.string()), "model-00002-of-00002.safetensors",
                     "is not there");
  // An index without a weight_map, and one naming a path outside the folder.
  write(f.dir / "model.safetensors.index.json", R"({"metadata": {}})");
  EXPECT_NABLA_ERROR(nb::load_safetensors_checkpoint(f.dir.string()), "no \"weight_map\"");
  write(f.dir / "model.safetensors.index.json", R"({"weight_map": {"a": "../x.safetensors"}})");
  EXPECT_NABLA_ERROR(nb::load_safetensors_checkpoint(f.dir.string()), "plain file names");
  // One file with a wrongly shaped tensor: load_hf_state_dict names it.
  fs::remove(f.dir / "model.safetensors.index.json");
  state["model.norm.weight"] = nb::ones({31});
  nb::save_safetensors((f.dir / "model.safetensors").string(), state);
  EXPECT_NABLA_ERROR(models::load_hf_llama(f.dir.string()), "model.norm.weight");
  fs::remove(f.dir / "model.safetensors");
  EXPECT_NABLA_ERROR(models::load_hf_llama(f.dir.string()), "neither model.safetensors.index.json");
}

TEST(LlamaHf, FuzzBodyReturnsOrThrowsOnMutatedSeeds) {
  std::mt19937_64 rng(test_seed());
  const auto run = [](const std::string& b) {
    return nabla::fuzz::hf_config_fuzz_one(reinterpret_cast<const uint8_t*>(b.data()), b.size());
  };
  int parsed = 0, total = 0;
  for (const auto& [name, seed] : nabla::fuzz::hf_config_fuzz_seeds()) {
    EXPECT_NE(run(seed), 0) << name;
    for (int i = 0; i < 400; ++i, ++total) parsed += run(nabla::fuzz::mutate(seed, i, rng)) != 0 ? 1 : 0;
  }
  EXPECT_LT(parsed, total);
  // An index naming a shard outside its folder is refused.
  EXPECT_NABLA_ERROR(nb::parse_safetensors_index(R"({"weight_map": {"w": "../w.safetensors"}})", "idx.json"),
                     "plain file names");
}

}  // namespace
