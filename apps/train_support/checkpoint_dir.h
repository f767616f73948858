// The checkpoint directory of a training run:
//   checkpoint-000001200.safetensors   one file per save, named by the global step
//   best.safetensors                   the best evaluation so far
// save() writes atomically (save_safetensors: temp file, fsync, rename), records the step in the
// file's metadata, then keeps only the newest keep_last files. `--resume auto` loads the newest
// checkpoint that parses and whose recorded step matches its name, skipping partial or corrupt
// files (a copy cut short, a disk that filled) and saying why.
//
//   CheckpointDir ckpt("runs/rn50", {.keep_last = 3});
//   if (save_due(step, save_every)) ckpt.save(step, state, {{"epoch", "4"}});
//   if (auto found = resume_checkpoint("auto", "runs/rn50")) load_from(found->file);
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "nabla/core/io/safetensors.h"

namespace nabla::train_support {

struct CheckpointDirOptions {
  int64_t keep_last = 0;  // > 0: keep this many step checkpoints (best is never removed); 0: keep all
};

struct FoundCheckpoint {
  std::string path;
  int64_t step = -1;  // -1 for a file given by name that records no step
  SafetensorsFile file;
  std::vector<std::string> skipped;  // newer files that were not valid, each "path: reason"
};

// Metadata key holding the global step of a checkpoint.
inline constexpr const char* kStepMetadataKey = "nabla.checkpoint.step";

// True every `save_every` steps (step > 0); never when save_every <= 0.
bool save_due(int64_t step, int64_t save_every);

class CheckpointDir {
 public:
  explicit CheckpointDir(std::string directory, const CheckpointDirOptions& options = {});

  std::string path_for_step(int64_t step) const;
  std::string best_path() const;

  // Writes checkpoint-<step>.safetensors (metadata gains kStepMetadataKey), then prunes. Returns the path.
  std::string save(int64_t step, const std::map<std::string, Tensor>& tensors,
                   std::map<std::string, std::string> metadata = {});
  // Writes best.safetensors (replacing the previous best atomically). Returns the path.
  std::string save_best(int64_t step, const std::map<std::string, Tensor>& tensors,
                        std::map<std::string, std::string> metadata = {});

  // Steps of the checkpoint files present, ascending (by name; validity is not checked).
  std::vector<int64_t> steps_on_disk() const;
  // The newest valid checkpoint, or nullopt when there is none (a fresh run).
  std::optional<FoundCheckpoint> load_latest_valid(Device device = Device::cpu()) const;

  const std::string& directory() const { return directory_; }

 private:
  void prune() const;

  std::string directory_;
  CheckpointDirOptions options_;
};

// `--resume`: "" starts fresh; "auto" loads the newest valid checkpoint in `directory` (fresh when
// there is none or the directory does not exist); anything else is a file, which must load.
std::optional<FoundCheckpoint> resume_checkpoint(const std::string& spec, const std::string& directory,
                                                 Device device = Device::cpu());

}  // namespace nabla::train_support
