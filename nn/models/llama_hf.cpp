// Hugging Face's LLaMA folders: config.json into a LlamaConfig, and the checkpoint (one file or
// shards) into the model (nn/models/llama.h).
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "nabla/core/error.h"
#include "nabla/core/io/safetensors.h"
#include "nabla/nn/models/llama.h"

namespace nabla::nn::models {

namespace {

using nlohmann::json;

// Typed reads of one config: each names the file and the field when it is missing or mistyped.
class ConfigReader {
 public:
  ConfigReader(const json& j, const std::string& name) : j_(j), name_(name) {}

  bool has(const char* field) const { return j_.contains(field) && !j_[field].is_null(); }

  int64_t integer(const char* field, std::optional<int64_t> fallback = {}) const {
    if (!has(field)) return required(field, fallback);
    NABLA_CHECK(j_[field].is_number_integer(), "{}: \"{}\" must be an integer, got {}", name_, field,
                j_[field].dump());
    return j_[field].get<int64_t>();
  }
  double number(const char* field, std::optional<double> fallback = {}) const {
    if (!has(field)) return required(field, fallback);
    NABLA_CHECK(j_[field].is_number(), "{}: \"{}\" must be a number, got {}", name_, field, j_[field].dump());
    return j_[field].get<double>();
  }
  bool boolean(const char* field, bool fallback) const {
    if (!has(field)) return fallback;
    NABLA_CHECK(j_[field].is_boolean(), "{}: \"{}\" must be true or false, got {}", name_, field,
                j_[field].dump());
    return j_[field].get<bool>();
  }
  std::string string(const char* field, const std::string& fallback) const {
    if (!has(field)) return fallback;
    NABLA_CHECK(j_[field].is_string(), "{}: \"{}\" must be a string, got {}", name_, field, j_[field].dump());
    return j_[field].get<std::string>();
  }

 private:
  template <class T>
  T required(const char* field, std::optional<T> fallback) const {
    NABLA_CHECK(fallback.has_value(), "{}: the field \"{}\" is missing", name_, field);
    return *fallback;
  }
  const json& j_;
  const std::string& name_;
};

// The scaling of a rope_scaling (or transformers 5's rope_parameters) object: none for
// "default", Llama 3's for "llama3"; any other type is an error naming it.
std::optional<RotaryScaling> rope_scaling_of(const json& j, const std::string& name, const char* field) {
  NABLA_CHECK(j.is_object(), "{}: \"{}\" must be null or an object, got {}", name, field, j.dump());
  const std::string where = name + " " + field;
  const ConfigReader r(j, where);
  // Older files call it "type".
  const std::string type = r.string("rope_type", r.string("type", "default"));
  if (type == "default") return std::nullopt;
  NABLA_CHECK(type == "llama3",
              "{}: rope_type \"{}\" is not supported; nabla's Llama takes \"default\" or \"llama3\"", name,
              type);
  return RotaryScaling{.factor = r.number("factor"),
                       .low_freq_factor = r.number("low_freq_factor"),
                       .high_freq_factor = r.number("high_freq_factor"),
                       .original_max_positions = r.integer("original_max_position_embeddings")};
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  NABLA_CHECK(in.good(), "load_llama_config: cannot open '{}'", path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

LlamaConfig llama_config_from_json(const std::string& text, const std::string& name) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    NABLA_CHECK(false, "{}: not JSON: {}", name, e.what());
  }
  NABLA_CHECK(j.is_object(), "{}: expected a JSON object, got {}", name, j.type_name());
  const ConfigReader r(j, name);
  LlamaConfig c;
  c.vocab = r.integer("vocab_size");
  c.width = r.integer("hidden_size");
  c.hidden = r.integer("intermediate_size");
  c.layers = r.integer("num_hidden_layers");
  c.heads = r.integer("num_attention_heads");
  c.kv_heads = r.integer("num_key_value_heads", c.heads);
  c.context = r.integer("max_position_embeddings", 2048);
  c.eps = r.number("rms_norm_eps", 1e-6);
  c.rope_base = r.number("rope_theta", 10000.0);
  c.tie_embeddings = r.boolean("tie_word_embeddings", false);
  // transformers 5 writes rope_theta and the scaling into "rope_parameters"; older files keep
  // them at the top level (rope_theta, rope_scaling).
  if (r.has("rope_parameters")) {
    const json& p = j["rope_parameters"];
    c.rope_scaling = rope_scaling_of(p, name, "rope_parameters");
    c.rope_base = ConfigReader(p, name + " rope_parameters").number("rope_theta", c.rope_base);
  } else if (r.has("rope_scaling")) {
    c.rope_scaling = rope_scaling_of(j["rope_scaling"], name, "rope_scaling");
  }

  NABLA_CHECK(c.vocab > 0 && c.width > 0 && c.hidden > 0 && c.layers > 0 && c.heads > 0 && c.kv_heads > 0 &&
                  c.context > 0,
              "{}: vocab_size, hidden_size, intermediate_size, num_hidden_layers, num_attention_heads, "
              "num_key_value_heads and max_position_embeddings must be > 0",
              name);
  NABLA_CHECK(c.width % c.heads == 0 && (c.width / c.heads) % 2 == 0,
              "{}: hidden_size {} must be a multiple of num_attention_heads {} with an even head size", name,
              c.width, c.heads);
  NABLA_CHECK(c.heads % c.kv_heads == 0,
              "{}: num_attention_heads {} must be a multiple of num_key_value_heads {} (each key/value head "
              "serves as many query heads)",
              name, c.heads, c.kv_heads);
  if (r.has("head_dim")) {
    NABLA_CHECK(r.integer("head_dim") == c.width / c.heads,
                "{}: head_dim {} differs from hidden_size / num_attention_heads = {}; nabla's Llama takes "
                "them equal",
                name, r.integer("head_dim"), c.width / c.heads);
  }
  NABLA_CHECK(std::isfinite(c.eps) && c.eps > 0, "{}: rms_norm_eps must be a positive number, got {}", name,
              c.eps);
  NABLA_CHECK(c.width / c.heads <= 4096,
              "{}: a head size of {} (hidden_size / num_attention_heads) is beyond 4096", name,
              c.width / c.heads);
  // The rotary tables' own checks (rope_theta > 0, a llama3 scaling's factors), at load time.
  try {
    rotary_frequencies(c.width / c.heads, c.rope_base, c.rope_scaling);
  } catch (const Error& e) {
    NABLA_CHECK(false, "{}: rope_theta or rope_scaling: {}", name, e.what());
  }
  NABLA_CHECK(!r.boolean("attention_bias", false) && !r.boolean("mlp_bias", false),
              "{}: attention_bias and mlp_bias must be false (nabla's Llama has no biases)", name);
  const std::string act = r.string("hidden_act", "silu");
  NABLA_CHECK(act == "silu", "{}: hidden_act \"{}\" is not supported (SwiGLU uses \"silu\")", name, act);
  return c;
}

LlamaConfig load_llama_config(const std::string& path) {
  return llama_config_from_json(read_text(path), path);
}

std::unique_ptr<Llama> load_hf_llama(const std::string& folder, Device device, DType dtype) {
  const std::filesystem::path dir(folder);
  NABLA_CHECK(std::filesystem::is_directory(dir), "load_hf_llama: '{}' is not a folder", folder);
  auto model = std::make_unique<Llama>(load_llama_config((dir / "config.json").string()));
  model->to(dtype);  // first, so the values convert once, from the checkpoint's dtype
  model->load_hf_state_dict(load_safetensors_checkpoint(folder).tensors);
  model->to(device);
  return model;
}

}  // namespace nabla::nn::models
