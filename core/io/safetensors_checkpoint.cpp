// load_safetensors_checkpoint: one file, or Hugging Face's shards behind an index
// (core/io/safetensors.h).
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "nabla/core/error.h"
#include "nabla/core/io/safetensors.h"

namespace nabla {

namespace {

namespace fs = std::filesystem;
constexpr const char* kOp = "load_safetensors_checkpoint";

// The index's text, from its file.
std::string read_index(const fs::path& index) {
  std::ifstream in(index);
  NABLA_CHECK(in.good(), "{}: cannot open '{}'", kOp, index.string());
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

std::map<std::string, std::string> parse_safetensors_index(const std::string& text, const std::string& name) {
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    NABLA_CHECK(false, "{}: '{}' is not JSON: {}", kOp, name, e.what());
  }
  NABLA_CHECK(json.is_object() && json.contains("weight_map") && json["weight_map"].is_object(),
              "{}: '{}' has no \"weight_map\" object (tensor name -> shard file)", kOp, name);
  std::map<std::string, std::string> shards;
  for (const auto& [key, file] : json["weight_map"].items()) {
    NABLA_CHECK(file.is_string(), "{}: '{}' maps '{}' to {}, not a file name", kOp, name, key, file.dump());
    const std::string shard = file.get<std::string>();
    // A shard is a file beside the index: no folders, no way out of it.
    NABLA_CHECK(
        !shard.empty() && fs::path(shard).filename() == fs::path(shard) && shard != "." && shard != "..",
        "{}: '{}' names the shard '{}' for '{}'; shards are plain file names beside the index", kOp, name,
        shard, key);
    shards[key] = shard;
  }
  return shards;
}

SafetensorsFile load_safetensors_checkpoint(const std::string& path, Device device) {
  fs::path p(path);
  if (fs::is_directory(p)) {
    if (fs::exists(p / "model.safetensors.index.json")) {
      p /= "model.safetensors.index.json";
    } else {
      NABLA_CHECK(fs::exists(p / "model.safetensors"),
                  "{}: '{}' holds neither model.safetensors.index.json nor model.safetensors", kOp, path);
      p /= "model.safetensors";
    }
  }
  if (p.extension() != ".json") return load_safetensors(p.string(), device);

  const std::map<std::string, std::string> shards = parse_safetensors_index(read_index(p), p.string());
  std::map<std::string, std::vector<std::string>> by_shard;
  for (const auto& [key, shard] : shards) by_shard[shard].push_back(key);
  SafetensorsFile out;
  bool first = true;
  for (const auto& [shard, keys] : by_shard) {
    const fs::path file = p.parent_path() / shard;
    NABLA_CHECK(fs::exists(file), "{}: the shard '{}' that '{}' names (for '{}' and {} more) is not there",
                kOp, file.string(), p.string(), keys.front(), keys.size() - 1);
    SafetensorsFile part = load_safetensors(file.string(), device);
    for (const std::string& key : keys) {
      auto it = part.tensors.find(key);
      NABLA_CHECK(it != part.tensors.end(),
                  "{}: '{}' names '{}' as the shard of '{}', which it does not hold", kOp, p.string(), shard,
                  key);
      out.tensors[key] = it->second;
    }
    if (first) out.metadata = std::move(part.metadata);
    first = false;
  }
  return out;
}

}  // namespace nabla
