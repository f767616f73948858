// resolve_recipe: checks nabla-train's flags and replaces each "auto" with the value the data and
// the device call for. Every rejection is one line that names the flag, the value given and what
// is allowed, because a user reading a training log should not need the source to fix a typo.
#include <algorithm>
#include <filesystem>
#include <thread>

#include "nabla/core/cuda/runtime.h"
#include "nabla/core/error.h"
#include "nabla/data/device_prefetcher.h"
#include "nabla_train/options.h"

namespace nabla::train {
namespace {

namespace fs = std::filesystem;

constexpr const char* kDataForms =
    "fashion-mnist[:DIR], cifar10:DIR, synthetic, or an ImageNet-layout directory with train/ and val/";
constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";

bool starts_with(const std::string& s, const std::string& prefix) {
  return s.rfind(prefix, 0) == 0;
}

void resolve_data(const TrainOptions& o, Recipe& r) {
  if (o.data == "synthetic") {
    r.data_kind = "synthetic";
    return;
  }
  if (o.data == "fashion-mnist" || starts_with(o.data, "fashion-mnist:")) {
    r.data_kind = "fashion-mnist";
    r.data_path = o.data == "fashion-mnist" ? kFashionMnistDir : o.data.substr(14);
    NABLA_CHECK(
        fs::is_directory(r.data_path),
        "--data {}: no directory {} (install Debian's dataset-fashion-mnist, or give fashion-mnist:DIR)",
        o.data, r.data_path);
    return;
  }
  if (starts_with(o.data, "cifar10:")) {
    r.data_kind = "cifar10";
    r.data_path = o.data.substr(8);
    NABLA_CHECK(fs::is_directory(r.data_path),
                "--data {}: no directory {} (the CIFAR-10 binary version, data_batch_1.bin ...)", o.data,
                r.data_path);
    return;
  }
  NABLA_CHECK(o.data.find(':') == std::string::npos || fs::exists(o.data),
              "--data {}: unknown data set; allowed: {}", o.data, kDataForms);
  NABLA_CHECK(fs::is_directory(o.data), "--data {}: no such directory; allowed: {}", o.data, kDataForms);
  NABLA_CHECK(
      fs::is_directory(fs::path(o.data) / "train"),
      "--data {}: no train/ folder inside; an ImageNet-layout directory has train/ and val/, each with "
      "one folder of JPEGs per class",
      o.data);
  NABLA_CHECK(fs::is_directory(fs::path(o.data) / "val"),
              "--data {}: no val/ folder inside; an ImageNet-layout directory has train/ and val/", o.data);
  r.data_kind = "imagenet";
  r.data_path = o.data;
}

Device resolve_device(const std::string& spec) {
  if (spec == "auto") return cuda::is_available() ? Device::cuda(0) : Device::cpu();
  if (spec == "cpu") return Device::cpu();
  if (spec == "cuda" || starts_with(spec, "cuda:")) {
    int index = 0;
    if (spec != "cuda") {
      const std::string digits = spec.substr(5);
      NABLA_CHECK(!digits.empty() && std::all_of(digits.begin(), digits.end(), ::isdigit),
                  "--device {}: expected cpu or cuda:N", spec);
      index = std::stoi(digits);
    }
    NABLA_CHECK(cuda::is_available(), "--device {}: no CUDA device on this machine; use --device cpu", spec);
    NABLA_CHECK(index < cuda::device_count(),
                "--device {}: this machine has {} CUDA device(s), cuda:0 to cuda:{}", spec,
                cuda::device_count(), cuda::device_count() - 1);
    return Device::cuda(index);
  }
  throw Error(fmt::format("--device {}: expected auto, cpu or cuda:N", spec));
}

std::string resolve_arch(const TrainOptions& o, const Recipe& r) {
  static const std::vector<std::string> known = {
      "resnet18",     "resnet34",           "resnet50",           "resnet101",       "resnet152", "smallcnn",
      "mobilenet_v2", "mobilenet_v3_large", "mobilenet_v3_small", "efficientnet_b0", "vit_b_16"};
  if (o.arch != "auto") {
    NABLA_CHECK(
        std::find(known.begin(), known.end(), o.arch) != known.end(),
        "--arch {}: unknown architecture; allowed: resnet18, resnet34, resnet50, resnet101, resnet152, "
        "smallcnn, mobilenet_v2, mobilenet_v3_large, mobilenet_v3_small, efficientnet_b0, vit_b_16",
        o.arch);
    return o.arch;
  }
  if (r.data_kind == "fashion-mnist") return r.device.is_cuda() ? "resnet18" : "smallcnn";
  if (r.data_kind == "cifar10") return "resnet18";
  return "resnet50";
}

int64_t resolve_epochs(const TrainOptions& o, const Recipe& r) {
  NABLA_CHECK(o.epochs >= 0, "--epochs {}: must be a positive number of passes", o.epochs);
  if (o.epochs > 0) return o.epochs;
  if (r.data_kind == "fashion-mnist") return r.device.is_cuda() ? 10 : 2;
  if (r.data_kind == "cifar10") return 30;
  if (r.data_kind == "imagenet") return 90;
  return 1;
}

void resolve_batch(const TrainOptions& o, Recipe& r) {
  if (o.batch_size == "auto") {
    NABLA_CHECK(r.device.is_cuda(), "--batch-size auto: needs a GPU (it searches the GPU's memory limit)");
    r.batch_size_auto = true;
    return;
  }
  int64_t value = 0;
  size_t used = 0;
  try {
    value = std::stoll(o.batch_size, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  NABLA_CHECK(used == o.batch_size.size() && value > 0,
              "--batch-size {}: must be a positive integer (images per GPU) or 'auto'", o.batch_size);
  r.batch_size = value;
}

void check_choice(const std::string& flag, const std::string& value,
                  const std::vector<std::string>& allowed) {
  if (std::find(allowed.begin(), allowed.end(), value) != allowed.end()) return;
  std::string list;
  for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
  throw Error(fmt::format("{} {}: allowed values are {}", flag, value, list));
}

void check_precision(const TrainOptions& o, const Recipe& r) {
  check_choice("--amp", o.amp, {"off", "fp16", "bf16"});
  NABLA_CHECK(o.amp == "off" || r.device.is_cuda(),
              "--amp {}: mixed precision needs a GPU, and --device is cpu; use --amp off", o.amp);
  if (o.loss_scale != "dynamic") {
    double scale = 0;
    try {
      scale = std::stod(o.loss_scale);
    } catch (const std::exception&) {
    }
    NABLA_CHECK(scale > 0, "--loss-scale {}: must be 'dynamic' or a positive number", o.loss_scale);
  }
  check_choice("--tf32", o.tf32, {"on", "off"});
}

void check_ranges(const TrainOptions& o, const Recipe& r) {
  check_choice("--optimizer", o.optimizer, {"sgd", "adamw", "lars"});
  check_choice("--oom-policy", o.oom_policy, {"error", "split"});
  NABLA_CHECK(o.lr >= 0, "--lr {}: must be positive", o.lr);
  NABLA_CHECK(o.lr_scale_batch >= 0, "--lr-scale-batch {}: must be positive (or 0: off)", o.lr_scale_batch);
  NABLA_CHECK(o.momentum >= 0 && o.momentum < 1, "--momentum {}: must be in [0, 1)", o.momentum);
  NABLA_CHECK(o.weight_decay == -1 || o.weight_decay >= 0, "--weight-decay {}: must be >= 0", o.weight_decay);
  NABLA_CHECK(o.clip_grad >= 0, "--clip-grad {}: must be >= 0 (0: off)", o.clip_grad);
  NABLA_CHECK(o.grad_accum_steps >= 1, "--grad-accum-steps {}: must be at least 1", o.grad_accum_steps);
  NABLA_CHECK(o.ema >= 0 && o.ema < 1, "--ema {}: the decay must be in [0, 1) (0: off)", o.ema);
  NABLA_CHECK(o.label_smoothing == -1 || (o.label_smoothing >= 0 && o.label_smoothing < 1),
              "--label-smoothing {}: must be in [0, 1)", o.label_smoothing);
  NABLA_CHECK(o.warmup_epochs == -1 || o.warmup_epochs >= 0, "--warmup-epochs {}: must be >= 0",
              o.warmup_epochs);
  NABLA_CHECK(o.lr_step_epochs > 0, "--lr-step-epochs {}: must be positive", o.lr_step_epochs);
  NABLA_CHECK(o.max_steps >= 0, "--max-steps {}: must be >= 0 (0: no limit)", o.max_steps);
  NABLA_CHECK(o.eval_every >= 0, "--eval-every {}: must be >= 0", o.eval_every);
  NABLA_CHECK(o.eval_batches >= 0, "--eval-batches {}: must be >= 0 (0: all)", o.eval_batches);
  NABLA_CHECK(o.save_every >= 0, "--save-every {}: must be >= 0 (0: each epoch)", o.save_every);
  NABLA_CHECK(o.keep_last >= 0, "--keep-last {}: must be >= 0 (0: keep all)", o.keep_last);
  NABLA_CHECK(o.workers == -1 || (o.workers >= 0 && o.workers <= 256), "--workers {}: must be in [0, 256]",
              o.workers);
  NABLA_CHECK(o.num_classes >= 0, "--num-classes {}: must be positive", o.num_classes);
  NABLA_CHECK(o.grad_checkpoint >= 0, "--grad-checkpoint {}: must be >= 0 (0: off)", o.grad_checkpoint);
  NABLA_CHECK(o.grad_checkpoint == 0 || r.arch.rfind("resnet", 0) == 0,
              "--grad-checkpoint {}: only the ResNets are checkpointed, not --arch {}", o.grad_checkpoint,
              r.arch);
  NABLA_CHECK(o.memory_fraction >= 0 && o.memory_fraction <= 1, "--memory-fraction {}: must be in (0, 1]",
              o.memory_fraction);
  NABLA_CHECK(o.memory_fraction == 0 || r.device.is_cuda(),
              "--memory-fraction {}: caps GPU memory, and --device is cpu", o.memory_fraction);
  NABLA_CHECK(o.nproc_per_node >= 1, "--nproc-per-node {}: must be at least 1", o.nproc_per_node);
  NABLA_CHECK(!o.evaluate_only || !o.pretrained.empty() || !o.resume.empty(),
              "--evaluate-only: give the weights to evaluate with --pretrained FILE or --resume auto|FILE");
  NABLA_CHECK(o.pretrained.empty() || std::filesystem::is_regular_file(o.pretrained),
              "--pretrained {}: no such file", o.pretrained);
}

void resolve_sizes(const TrainOptions& o, Recipe& r) {
  const int64_t fixed = r.data_kind == "fashion-mnist" ? 28 : r.data_kind == "cifar10" ? 32 : 0;
  NABLA_CHECK(o.image_size >= 0, "--image-size {}: must be positive", o.image_size);
  if (fixed > 0) {
    NABLA_CHECK(o.image_size == 0 || o.image_size == fixed,
                "--image-size {}: {} images are {}x{}; only imagenet and synthetic data are resized",
                o.image_size, r.data_kind, fixed, fixed);
    r.image_size = fixed;
  } else {
    r.image_size = o.image_size > 0 ? o.image_size : 224;
    NABLA_CHECK(r.image_size >= 16 && r.image_size <= 1024, "--image-size {}: must be in [16, 1024]",
                r.image_size);
  }
  NABLA_CHECK(r.arch != "smallcnn" || r.image_size % 4 == 0,
              "--image-size {}: --arch smallcnn pools twice by 2, so the side must be a multiple of 4",
              r.image_size);
  NABLA_CHECK(r.arch != "vit_b_16" || r.image_size % 16 == 0,
              "--arch vit_b_16 cuts the image into 16x16 patches, so the side must be a multiple of 16; {} "
              "images are {}x{} (--image-size resizes imagenet and synthetic data only)",
              r.data_kind, r.image_size, r.image_size);
  NABLA_CHECK(o.val_resize == 0 || o.val_resize >= r.image_size,
              "--val-resize {}: must be at least --image-size {}", o.val_resize, r.image_size);
  r.val_resize = o.val_resize > 0 ? o.val_resize : r.image_size * 256 / 224;
}

}  // namespace

Recipe resolve_recipe(const TrainOptions& o) {
  Recipe r;
  r.device = resolve_device(o.device);
  resolve_data(o, r);
  r.arch = resolve_arch(o, r);
  r.epochs = resolve_epochs(o, r);
  resolve_batch(o, r);
  check_precision(o, r);
  check_ranges(o, r);
  resolve_sizes(o, r);

  const bool small_data = r.data_kind == "fashion-mnist" || r.data_kind == "cifar10";
  r.lr_schedule = o.lr_schedule != "auto" ? o.lr_schedule : small_data ? "onecycle" : "cosine";
  check_choice("--lr-schedule", r.lr_schedule, {"step", "cosine", "linear", "onecycle", "poly"});
  r.warmup_epochs = o.warmup_epochs >= 0 ? o.warmup_epochs : r.data_kind == "imagenet" ? 5.0 : 0.0;
  NABLA_CHECK(r.lr_schedule != "onecycle" || r.warmup_epochs == 0,
              "--warmup-epochs {}: onecycle has its own warmup (the first 30% of the steps); use 0",
              r.warmup_epochs);
  r.label_smoothing = o.label_smoothing >= 0 ? o.label_smoothing : r.data_kind == "imagenet" ? 0.1 : 0.0;
  if (o.weight_decay >= 0) {
    r.weight_decay = o.weight_decay;
  } else {
    r.weight_decay = o.optimizer == "adamw" ? 0.05 : small_data ? 5e-4 : 1e-4;
  }
  double lr = o.lr > 0 ? o.lr : o.optimizer == "adamw" ? 1e-3 : r.arch == "smallcnn" ? 0.05 : 0.1;
  if (o.lr_scale_batch > 0 && !r.batch_size_auto) {
    lr *= static_cast<double>(r.batch_size * o.nproc_per_node * o.grad_accum_steps) /
          static_cast<double>(o.lr_scale_batch);
  }
  r.lr = lr;
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  // In-memory data sets on the CPU need one loader thread at most: the cores are busy training.
  const bool in_memory = r.data_kind != "imagenet";
  r.workers = o.workers >= 0 ? o.workers : (r.device.is_cuda() || !in_memory) ? std::min(8, cores) : 1;
  if (o.decode != "cpu") {
    const std::string why = r.data_kind != "imagenet"
                                ? "only JPEG folders (an ImageNet-layout DIR) are decoded on the GPU"
                            : !r.device.is_cuda() ? "the run trains on the CPU"
                                                  : data::gpu_decode_unavailable_reason();
    NABLA_CHECK(why.empty() || o.decode == "auto", "--decode gpu: {}; use --decode cpu or auto", why);
    r.gpu_decode = why.empty();
  }
  r.checkpoint_dir = o.checkpoint_dir != "auto" ? o.checkpoint_dir : "runs/" + r.data_kind + "-" + r.arch;
  return r;
}

}  // namespace nabla::train
