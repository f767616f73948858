// The body shared by the libFuzzer target (hf_config_fuzz.cpp) and the corpus test that runs in CI
// (tests/nn/llama_hf_test.cpp): bytes as the two JSON files of a Hugging Face LLaMA folder that
// nabla reads, config.json (llama_config_from_json) and model.safetensors.index.json
// (parse_safetensors_index). A nabla::Error is the only acceptable failure; a config or index
// that parses must satisfy what the loaders rely on.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "nabla/core/error.h"
#include "nabla/core/io/safetensors.h"
#include "nabla/nn/models/llama.h"

namespace nabla::fuzz {

// Bit 0: parsed as a config; bit 1: parsed as an index.
inline int hf_config_fuzz_one(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  int parsed = 0;
  try {
    const nn::models::LlamaConfig c = nn::models::llama_config_from_json(text, "<fuzz input>");
    const bool sane = c.vocab > 0 && c.width > 0 && c.hidden > 0 && c.layers > 0 && c.heads > 0 &&
                      c.kv_heads > 0 && c.context > 0 && c.width % c.heads == 0 &&
                      c.heads % c.kv_heads == 0 && (c.width / c.heads) % 2 == 0 && c.eps > 0 &&
                      c.rope_base > 0;
    if (!sane) __builtin_trap();
    parsed |= 1;
  } catch (const nabla::Error&) {
  }
  try {
    for (const auto& [tensor, shard] : parse_safetensors_index(text, "<fuzz input>")) {
      // Plain file names beside the index: the loader joins them to the index's folder.
      if (shard.empty() || shard == "." || shard == ".." || shard.find('/') != std::string::npos)
        __builtin_trap();
    }
    parsed |= 2;
  } catch (const nabla::Error&) {
  }
  return parsed;
}

// TinyLlama's config (transformers 4), a Llama 3 config with rope_scaling, a transformers 5
// config with rope_parameters, and a two-shard index: the seeds.
inline std::vector<std::pair<std::string, std::string>> hf_config_fuzz_seeds() {
  return {
      {"tinyllama_config.json",
       R"({"architectures": ["LlamaForCausalLM"], "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu",
"hidden_size": 2048, "initializer_range": 0.02, "intermediate_size": 5632, "max_position_embeddings": 2048,
"model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 22, "num_key_value_heads": 4,
"pretraining_tp": 1, "rms_norm_eps": 1e-05, "rope_scaling": null, "tie_word_embeddings": false,
"torch_dtype": "bfloat16", "transformers_version": "4.35.0", "use_cache": true, "vocab_size": 32000})"},
      {"llama3_config.json",
       R"({"attention_bias": false, "hidden_act": "silu", "hidden_size": 2048, "intermediate_size": 8192,
"max_position_embeddings": 131072, "mlp_bias": false, "num_attention_heads": 32, "num_hidden_layers": 16,
"num_key_value_heads": 8, "rms_norm_eps": 1e-05, "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0,
"low_freq_factor": 1.0, "original_max_position_embeddings": 8192, "rope_type": "llama3"},
"rope_theta": 500000.0, "tie_word_embeddings": true, "vocab_size": 128256, "head_dim": 64})"},
      {"transformers5_config.json",
       R"({"hidden_size": 64, "intermediate_size": 160, "num_attention_heads": 4, "num_hidden_layers": 2,
"num_key_value_heads": 2, "vocab_size": 97, "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}})"},
      {"model.safetensors.index.json",
       R"({"metadata": {"total_size": 2471645184}, "weight_map": {"lm_head.weight": "model-00002-of-00002.safetensors",
"model.embed_tokens.weight": "model-00001-of-00002.safetensors",
"model.layers.0.self_attn.q_proj.weight": "model-00001-of-00002.safetensors",
"model.norm.weight": "model-00002-of-00002.safetensors"}})"},
  };
}

}  // namespace nabla::fuzz
