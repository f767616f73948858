// nabla-train's options: the flags as the user gives them (TrainOptions), and the run's recipe
// once every "auto" is resolved against the data and the device (resolve_recipe). Keeping the
// two apart lets --help show honest defaults ("auto: 2 epochs on CPU, 10 on GPU") while the
// training loop only ever sees concrete values.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

#include "nabla/core/device.h"

namespace nabla::train {

// The flags, one field each; "auto" values are 0, -1 or the string "auto".
struct TrainOptions {
  // Data.
  std::string data = "fashion-mnist";  // fashion-mnist[:DIR] | cifar10:DIR | synthetic | DIR (train/, val/)
  int workers = -1;                    // -1: min(8, hardware threads)
  std::string decode = "cpu";          // JPEG folders: cpu | gpu (nvJPEG) | auto
  int prefetch = 4;
  bool pin_memory = true;
  int64_t image_size = 0;  // 0: 28 (Fashion-MNIST), 32 (CIFAR), 224 (ImageNet, synthetic)
  int64_t val_resize = 0;  // 0: image_size * 256 / 224 (ImageNet)
  std::string on_bad_sample = "error";
  bool strict_jpeg = false;        // damaged JPEG scan data is a bad sample, not a logged warning
  int64_t synthetic_size = 12800;  // images per epoch for --data synthetic

  // Model.
  std::string arch = "auto";
  int64_t num_classes = 0;  // 0: from the data
  bool channels_last = false;
  bool zero_init_residual = false;
  std::string pretrained;
  int grad_checkpoint = 0;

  // Optimization.
  int64_t epochs = 0;  // 0: per data set and device
  std::string batch_size = "128";
  std::string optimizer = "sgd";
  double lr = 0;  // 0: 0.05 for smallcnn, 0.1 otherwise
  int64_t lr_scale_batch = 0;
  double momentum = 0.9;
  bool nesterov = true;
  double weight_decay = -1;  // -1: 5e-4 (small data sets), 1e-4 (ImageNet), 0.05 (adamw)
  bool no_bn_weight_decay = false;
  std::string lr_schedule = "auto";  // auto: onecycle for small data sets, cosine for ImageNet
  double warmup_epochs = -1;         // -1: 0 (onecycle), 5 (ImageNet), 0 otherwise
  double label_smoothing = -1;       // -1: 0.1 for ImageNet, 0 otherwise
  double clip_grad = 0;
  int grad_accum_steps = 1;
  double ema = 0;
  double lr_step_gamma = 0.1;  // --lr-schedule step: multiply by this every lr-step-epochs
  int64_t lr_step_epochs = 30;
  std::string oom_policy = "error";
  bool cuda_graph = false;  // capture the training step into a CUDA graph and replay it

  // Precision.
  std::string amp = "off";
  std::string loss_scale = "dynamic";
  std::string tf32 = "on";

  // Run.
  std::string device = "auto";
  uint64_t seed = 0;
  bool deterministic = false;
  int64_t max_steps = 0;  // 0: no limit
  int64_t eval_every = 1;
  bool evaluate_only = false;
  int64_t eval_batches = 0;  // 0: the whole validation set
  int nproc_per_node = 1;

  // Checkpoints.
  std::string checkpoint_dir = "auto";  // auto: runs/<data>-<arch>
  int64_t save_every = 0;               // steps; 0: at the end of each epoch
  int64_t keep_last = 3;
  std::string resume;  // "", auto or FILE

  // Memory.
  double memory_fraction = 0;
  bool memory_report = false;

  // Output.
  std::string log_level = "info";
  std::string progress = "auto";  // auto | bar | lines | off
  bool tensorboard = true;
};

// The run as it will happen: every "auto" replaced, every value checked.
struct Recipe {
  std::string data_kind;  // fashion-mnist | cifar10 | synthetic | imagenet
  std::string data_path;  // the directory read (empty for synthetic)
  Device device;
  std::string arch;
  int64_t epochs = 0;
  int64_t batch_size = 0;  // per process; 0 while --batch-size auto is unresolved
  bool batch_size_auto = false;
  double lr = 0;  // after --lr-scale-batch
  double weight_decay = 0;
  std::string lr_schedule;
  double warmup_epochs = 0;
  double label_smoothing = 0;
  int64_t image_size = 0;
  int64_t val_resize = 0;
  int workers = 0;
  bool gpu_decode = false;  // the workers leave JPEGs to nvJPEG (DataLoaderOptions::defer_decode)
  std::string checkpoint_dir;
};

// Adds every flag to `app` in groups (Data, Model, Optimization, Precision, Run, Checkpoints,
// Memory, Output), with defaults shown, plus --config FILE.
void add_train_flags(CLI::App& app, TrainOptions& options);

// Checks the flags against each other and the machine and fills in the "auto" values. Throws
// nabla::Error with a one-line message naming the flag and what is allowed.
Recipe resolve_recipe(const TrainOptions& options);

}  // namespace nabla::train
