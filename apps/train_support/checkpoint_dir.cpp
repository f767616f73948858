#include "nabla/apps/train_support/checkpoint_dir.h"

#include <fmt/format.h>
#include <algorithm>
#include <charconv>
#include <filesystem>

#include "nabla/core/error.h"

namespace nabla::train_support {
namespace fs = std::filesystem;
namespace {

constexpr std::string_view kPrefix = "checkpoint-";
constexpr std::string_view kSuffix = ".safetensors";

// The step in "checkpoint-<digits>.safetensors", or nullopt for any other name (temp files
// "....safetensors.tmp.<pid>", best.safetensors, the user's own files).
std::optional<int64_t> step_from_name(const std::string& name) {
  if (!name.starts_with(kPrefix) || !name.ends_with(kSuffix)) return std::nullopt;
  std::string_view digits(name.data() + kPrefix.size(), name.size() - kPrefix.size() - kSuffix.size());
  if (digits.empty() ||
      !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return std::nullopt;
  int64_t step = 0;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), step);
  if (ec != std::errc() || end != digits.data() + digits.size()) return std::nullopt;
  return step;
}

}  // namespace

bool save_due(int64_t step, int64_t save_every) {
  return save_every > 0 && step > 0 && step % save_every == 0;
}

CheckpointDir::CheckpointDir(std::string directory, const CheckpointDirOptions& options)
    : directory_(std::move(directory)), options_(options) {
  NABLA_CHECK(!directory_.empty(), "CheckpointDir: the directory name is empty");
  NABLA_CHECK(options_.keep_last >= 0, "CheckpointDir: keep_last must be >= 0 (0 keeps all), got {}",
              options_.keep_last);
  std::error_code ec;
  fs::create_directories(directory_, ec);
  NABLA_CHECK(!ec, "CheckpointDir: cannot create '{}': {}", directory_, ec.message());
}

std::string CheckpointDir::path_for_step(int64_t step) const {
  NABLA_CHECK(step >= 0, "CheckpointDir: a checkpoint step must be >= 0, got {}", step);
  return (fs::path(directory_) / fmt::format("{}{:09}{}", kPrefix, step, kSuffix)).string();
}

std::string CheckpointDir::best_path() const {
  return (fs::path(directory_) / "best.safetensors").string();
}

std::string CheckpointDir::save(int64_t step, const std::map<std::string, Tensor>& tensors,
                                std::map<std::string, std::string> metadata) {
  std::string path = path_for_step(step);
  metadata[kStepMetadataKey] = std::to_string(step);
  save_safetensors(path, tensors, metadata);
  prune();
  return path;
}

std::string CheckpointDir::save_best(int64_t step, const std::map<std::string, Tensor>& tensors,
                                     std::map<std::string, std::string> metadata) {
  metadata[kStepMetadataKey] = std::to_string(step);
  save_safetensors(best_path(), tensors, metadata);
  return best_path();
}

std::vector<int64_t> CheckpointDir::steps_on_disk() const {
  std::vector<int64_t> steps;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(directory_, ec)) {
    if (!entry.is_regular_file(ec)) continue;
    if (auto step = step_from_name(entry.path().filename().string())) steps.push_back(*step);
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

void CheckpointDir::prune() const {
  if (options_.keep_last <= 0) return;
  std::vector<int64_t> steps = steps_on_disk();
  const auto excess = static_cast<int64_t>(steps.size()) - options_.keep_last;
  for (int64_t i = 0; i < excess; ++i) {
    std::error_code ec;  // a file someone else removed first is fine
    fs::remove(path_for_step(steps[i]), ec);
  }
}

std::optional<FoundCheckpoint> CheckpointDir::load_latest_valid(Device device) const {
  std::vector<int64_t> steps = steps_on_disk();
  std::vector<std::string> skipped;
  for (auto it = steps.rbegin(); it != steps.rend(); ++it) {
    const std::string path = path_for_step(*it);
    try {
      SafetensorsFile file = load_safetensors(path, device);
      auto recorded = file.metadata.find(kStepMetadataKey);
      NABLA_CHECK(recorded != file.metadata.end() && recorded->second == std::to_string(*it),
                  "its metadata records step '{}', not {}",
                  recorded == file.metadata.end() ? "<none>" : recorded->second, *it);
      return FoundCheckpoint{
          .path = path, .step = *it, .file = std::move(file), .skipped = std::move(skipped)};
    } catch (const Error& e) {
      skipped.push_back(path + ": " + e.what());
    }
  }
  return std::nullopt;
}

std::optional<FoundCheckpoint> resume_checkpoint(const std::string& spec, const std::string& directory,
                                                 Device device) {
  if (spec.empty()) return std::nullopt;
  if (spec == "auto") {
    if (directory.empty() || !fs::is_directory(directory)) return std::nullopt;
    return CheckpointDir(directory).load_latest_valid(device);
  }
  NABLA_CHECK(fs::is_regular_file(spec), "--resume: '{}' is not a file (give a checkpoint file or 'auto')",
              spec);
  FoundCheckpoint found{.path = spec, .file = load_safetensors(spec, device), .skipped = {}};
  auto recorded = found.file.metadata.find(kStepMetadataKey);
  if (recorded != found.file.metadata.end()) {
    int64_t step = -1;
    auto [end, ec] =
        std::from_chars(recorded->second.data(), recorded->second.data() + recorded->second.size(), step);
    NABLA_CHECK(ec == std::errc() && end == recorded->second.data() + recorded->second.size() && step >= 0,
                "--resume: '{}' records a step '{}' that is not a non-negative integer", spec,
                recorded->second);
    found.step = step;
  }
  return found;
}

}  // namespace nabla::train_support
