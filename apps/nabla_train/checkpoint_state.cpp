// What a nabla-train checkpoint holds, and resuming from one. One safetensors file carries the
// whole run: model (torchvision names under "model."), optimizer, schedule, loss scaler, EMA, the
// position (epoch, batch, step, best accuracy) and the random generators' states. The data order
// needs nothing more: samplers are functions of (seed, epoch), and ResumeSampler skips the
// batches of the interrupted epoch that were already trained on.
#include <bit>
#include <filesystem>

#include <fmt/ranges.h>

#include "nabla/core/cuda/runtime.h"
#include "nabla/core/generator.h"
#include "nabla/core/io/safetensors.h"
#include "nabla/core/logging.h"
#include "nabla/distributed/ddp.h"
#include "nabla/ops/factory.h"
#include "nabla_train/job.h"

namespace nabla::train {
namespace {

constexpr const char* kArchKey = "nabla.train.arch";
constexpr const char* kClassesKey = "nabla.train.num_classes";

void put(std::map<std::string, Tensor>& out, const std::string& prefix,
         const std::map<std::string, Tensor>& in) {
  for (const auto& [key, value] : in) out[prefix + key] = value;
}

std::map<std::string, Tensor> take(const std::map<std::string, Tensor>& in, const std::string& prefix) {
  std::map<std::string, Tensor> out;
  for (const auto& [key, value] : in) {
    if (key.rfind(prefix, 0) == 0) out[key.substr(prefix.size())] = value;
  }
  return out;
}

Tensor int64_scalar(int64_t v) {
  return full({}, static_cast<double>(v), {.dtype = kInt64});
}

// A Philox state as two int64s (the bits of the two uint64 fields).
Tensor generator_state(Device device) {
  const auto s = default_generator(device).state();
  Tensor t = zeros({2}, {.dtype = kInt64});
  t.data_ptr<int64_t>()[0] = std::bit_cast<int64_t>(s.seed);
  t.data_ptr<int64_t>()[1] = std::bit_cast<int64_t>(s.offset);
  return t;
}

void set_generator_state(Device device, const Tensor& t) {
  const Tensor c = t.cpu().contiguous();
  NABLA_CHECK(c.numel() == 2 && c.dtype() == kInt64, "checkpoint: a generator state must be 2 int64 values");
  default_generator(device).set_state({.seed = std::bit_cast<uint64_t>(c.data_ptr<int64_t>()[0]),
                                       .offset = std::bit_cast<uint64_t>(c.data_ptr<int64_t>()[1])});
}

int64_t int64_of(const std::map<std::string, Tensor>& state, const std::string& key) {
  auto it = state.find(key);
  NABLA_CHECK(it != state.end(), "checkpoint: no '{}' entry; this file was not written by nabla-train", key);
  return static_cast<int64_t>(it->second.item<double>());
}

}  // namespace

std::map<std::string, Tensor> Job::state_tensors() const {
  std::map<std::string, Tensor> s;
  put(s, "model.", model->state_dict());
  put(s, "optimizer.", optimizer->state_dict());
  if (scheduler) put(s, "scheduler.", scheduler->state_dict());
  put(s, "scaler.", scaler->state_dict());
  if (ema) put(s, "ema.", ema->state_dict());
  s["train.epoch"] = int64_scalar(position.epoch);
  s["train.batch_in_epoch"] = int64_scalar(position.batch_in_epoch);
  s["train.step"] = int64_scalar(position.step);
  s["train.best_top1"] = full({}, position.best_top1, {.dtype = kFloat64});
  s["rng.cpu"] = generator_state(Device::cpu());
  if (device.is_cuda()) s["rng.cuda"] = generator_state(device);
  return s;
}

std::map<std::string, std::string> Job::state_metadata() const {
  return {{kArchKey, recipe.arch},
          {kClassesKey, std::to_string(data.num_classes)},
          {"nabla.train.data", options.data},
          {"nabla.train.batch_size", std::to_string(recipe.batch_size)},
          {"nabla.train.world_size", std::to_string(world_size)}};
}

void Job::save_checkpoint(bool best) {
  if (!is_main() || !checkpoints) return;
  const auto tensors = state_tensors();
  const auto path = best ? checkpoints->save_best(position.step, tensors, state_metadata())
                         : checkpoints->save(position.step, tensors, state_metadata());
  logger().info("saved {} (step {})", path, position.step);
}

bool Job::resume() {
  if (options.resume.empty()) return false;
  auto found = train_support::resume_checkpoint(options.resume, recipe.checkpoint_dir, Device::cpu());
  for (const auto& skipped : found ? found->skipped : std::vector<std::string>{}) {
    logger().warn("resume: skipped {}", skipped);
  }
  if (!found) {
    logger().info("resume auto: no checkpoint in {} yet; starting fresh", recipe.checkpoint_dir);
    return false;
  }
  const auto& meta = found->file.metadata;
  auto arch = meta.find(kArchKey);
  NABLA_CHECK(arch != meta.end(), "--resume {}: not a nabla-train checkpoint (no {} metadata)", found->path,
              kArchKey);
  NABLA_CHECK(arch->second == recipe.arch,
              "--resume {}: the checkpoint is from --arch {}, this run is --arch {}", found->path,
              arch->second, recipe.arch);
  auto classes = meta.find(kClassesKey);
  NABLA_CHECK(classes != meta.end() && classes->second == std::to_string(data.num_classes),
              "--resume {}: the checkpoint's model has {} classes, this run has {}", found->path,
              classes == meta.end() ? "?" : classes->second, data.num_classes);
  const auto& t = found->file.tensors;
  model->load_state_dict(take(t, "model."), /*strict=*/true);
  optimizer->load_state_dict(take(t, "optimizer."));
  if (scheduler) scheduler->load_state_dict(take(t, "scheduler."));
  scaler->load_state_dict(take(t, "scaler."));
  if (ema) ema->load_state_dict(take(t, "ema."));
  position.epoch = int64_of(t, "train.epoch");
  position.batch_in_epoch = int64_of(t, "train.batch_in_epoch");
  position.step = int64_of(t, "train.step");
  position.best_top1 = t.at("train.best_top1").item<double>();
  set_generator_state(Device::cpu(), t.at("rng.cpu"));
  if (device.is_cuda() && t.count("rng.cuda")) set_generator_state(device, t.at("rng.cuda"));
  logger().info("resumed from {}: epoch {}, step {}", found->path, position.epoch + 1, position.step);
  return true;
}

void Job::load_pretrained() {
  if (options.pretrained.empty()) return;
  auto file = load_safetensors(options.pretrained);
  // Fine-tuning to other classes: a classifier of another shape is left at its fresh init.
  auto own = model->state_dict();
  std::map<std::string, Tensor> usable;
  for (auto& [key, value] : file.tensors) {
    auto it = own.find(key);
    if (it != own.end() && it->second.sizes() != value.sizes()) {
      logger().warn(
          "--pretrained {}: {} has shape [{}] in the file and [{}] in the model; left at its initial value",
          options.pretrained, key, fmt::join(value.sizes(), ", "), fmt::join(it->second.sizes(), ", "));
      continue;
    }
    usable[key] = value;
  }
  const auto result = model->load_state_dict(usable, /*strict=*/false);
  const size_t loaded = usable.size() - result.unexpected_keys.size();
  NABLA_CHECK(loaded > own.size() / 2,
              "--pretrained {}: only {} of the model's {} tensors are in the file; is it a {}?",
              options.pretrained, loaded, own.size(), recipe.arch);
  if (!result.missing_keys.empty()) {
    logger().warn("--pretrained {}: {} model tensors not in the file, e.g. {}", options.pretrained,
                  result.missing_keys.size(), result.missing_keys.front());
  }
  logger().info("loaded {} tensors from {}", loaded, options.pretrained);
}

}  // namespace nabla::train
