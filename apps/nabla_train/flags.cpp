// nabla-train's command line: every flag, grouped as --help shows them. Values that depend on
// the data or the device default to "auto" and are resolved in recipe.cpp; the help text says
// what auto means so nobody has to read the code.
#include "nabla/apps/train_support/config_file.h"
#include "nabla_train/options.h"

namespace nabla::train {
namespace {

// Shows "auto" instead of the sentinel (0 or -1) the field holds until resolve_recipe.
CLI::Option* auto_default(CLI::Option* option) {
  return option->default_str("auto");
}

}  // namespace

void add_train_flags(CLI::App& app, TrainOptions& o) {
  // A flag given twice takes the last value, as shells and scripts that append overrides expect.
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  train_support::add_config_option(app);

  const char* data = "Data";
  app.add_option("--data", o.data,
                 "fashion-mnist[:DIR] (Debian's dataset-fashion-mnist), cifar10:DIR (the binary version), "
                 "synthetic, or an ImageNet-layout DIR with train/ and val/ class folders of JPEGs")
      ->capture_default_str()
      ->group(data);
  auto_default(app.add_option("--workers", o.workers,
                              "Loader threads (auto: min(8, cores) for GPU runs and JPEG folders; 1 for "
                              "in-memory data on the CPU)")
                   ->group(data));
  app.add_option("--decode", o.decode,
                 "Where JPEG folders are decoded: cpu (the loader threads), gpu (the threads read files; "
                 "nvJPEG decodes, crops and normalizes on the GPU), or auto (gpu where nvJPEG is available)")
      ->capture_default_str()
      ->check(CLI::IsMember({"cpu", "gpu", "auto"}))
      ->group(data);
  app.add_option("--prefetch", o.prefetch, "Batches the loader prepares ahead")
      ->capture_default_str()
      ->check(CLI::Range(1, 64))
      ->group(data);
  // On/off pairs are two flags, so --help shows each plainly instead of CLI11's "{false}" marker.
  app.add_flag("--pin-memory", o.pin_memory, "Page-locked batch buffers for GPU uploads (the default)")
      ->group(data);
  app.add_flag_callback(
         "--no-pin-memory", [&o] { o.pin_memory = false; }, "Pageable batch buffers")
      ->group(data);
  auto_default(app.add_option("--image-size", o.image_size,
                              "Training crop side in pixels (auto: 28 Fashion-MNIST, 32 CIFAR, 224 ImageNet)")
                   ->group(data));
  auto_default(app.add_option("--val-resize", o.val_resize,
                              "ImageNet validation: resize the shorter side to this, then center-crop "
                              "--image-size (auto: image-size * 256 / 224)")
                   ->group(data));
  app.add_option("--on-bad-sample", o.on_bad_sample,
                 "A file that cannot be decoded: error (stop, naming it) or skip (count it, log it)")
      ->capture_default_str()
      ->check(CLI::IsMember({"error", "skip"}))
      ->group(data);
  app.add_flag("--strict-jpeg", o.strict_jpeg,
               "A JPEG with damaged scan data (a bad Huffman code, a marker inside a scan) is a bad "
               "sample for --on-bad-sample; by default it is decoded, filled in, and logged once")
      ->group(data);
  app.add_option("--synthetic-size", o.synthetic_size, "Images per epoch for --data synthetic")
      ->capture_default_str()
      ->group(data);

  const char* model = "Model";
  app.add_option("--arch", o.arch,
                 "resnet18|resnet34|resnet50|resnet101|resnet152|smallcnn|mobilenet_v2|mobilenet_v3_large|"
                 "mobilenet_v3_small|efficientnet_b0|vit_b_16 (auto: smallcnn on CPU and resnet18 on GPU for "
                 "Fashion-MNIST, resnet18 for CIFAR-10, resnet50 for ImageNet)")
      ->capture_default_str()
      ->group(model);
  auto_default(
      app.add_option("--num-classes", o.num_classes, "Output classes (auto: from the data)")->group(model));
  app.add_flag("--channels-last", o.channels_last, "Model and batches in NHWC (faster on tensor cores)")
      ->group(model);
  app.add_flag("--zero-init-residual", o.zero_init_residual, "Start each residual block's last BN at 0")
      ->group(model);
  app.add_option("--pretrained", o.pretrained, "Start from these weights (.safetensors, torchvision names)")
      ->group(model);
  app.add_option("--grad-checkpoint", o.grad_checkpoint,
                 "Gradient checkpointing: recompute activations in this many segments (0: off)")
      ->capture_default_str()
      ->group(model);

  const char* opt = "Optimization";
  auto_default(app.add_option("--epochs", o.epochs,
                              "Passes over the training set (auto: Fashion-MNIST 2 on CPU / 10 on GPU, "
                              "CIFAR-10 30, ImageNet 90, synthetic 1)")
                   ->group(opt));
  app.add_option("--batch-size", o.batch_size,
                 "Images per step per GPU, or 'auto': the largest that fits in memory (found by trial steps)")
      ->capture_default_str()
      ->group(opt);
  app.add_option("--optimizer", o.optimizer, "sgd, adamw or lars")->capture_default_str()->group(opt);
  auto_default(
      app.add_option("--lr", o.lr, "Peak learning rate (auto: 0.05 smallcnn, 0.1 others; adamw 1e-3)")
          ->group(opt));
  app.add_option("--lr-scale-batch", o.lr_scale_batch,
                 "Linear scaling: lr *= global batch / this (e.g. 256 for the ImageNet recipe; 0: off)")
      ->capture_default_str()
      ->group(opt);
  app.add_option("--momentum", o.momentum, "SGD/LARS momentum (adamw: beta1)")
      ->capture_default_str()
      ->group(opt);
  app.add_flag("--nesterov", o.nesterov, "Nesterov momentum for sgd and lars (the default)")->group(opt);
  app.add_flag_callback(
         "--no-nesterov", [&o] { o.nesterov = false; }, "Plain momentum instead of Nesterov")
      ->group(opt);
  auto_default(app.add_option("--weight-decay", o.weight_decay,
                              "Weight decay (auto: 5e-4 small data sets, 1e-4 ImageNet, 0.05 adamw)")
                   ->group(opt));
  app.add_flag("--no-bn-weight-decay", o.no_bn_weight_decay,
               "No weight decay on biases and normalization parameters (every 1-d parameter)")
      ->group(opt);
  app.add_option("--lr-schedule", o.lr_schedule,
                 "step, cosine, linear, onecycle or poly (auto: onecycle for Fashion-MNIST and CIFAR, "
                 "cosine for ImageNet and synthetic)")
      ->capture_default_str()
      ->group(opt);
  auto_default(app.add_option("--warmup-epochs", o.warmup_epochs,
                              "Linear warmup before the schedule (auto: 5 for ImageNet, else 0)")
                   ->group(opt));
  app.add_option("--lr-step-epochs", o.lr_step_epochs, "--lr-schedule step: decay every this many epochs")
      ->capture_default_str()
      ->group(opt);
  app.add_option("--lr-step-gamma", o.lr_step_gamma, "--lr-schedule step: multiply the lr by this")
      ->capture_default_str()
      ->group(opt);
  auto_default(
      app.add_option("--label-smoothing", o.label_smoothing, "Label smoothing (auto: 0.1 ImageNet, else 0)")
          ->group(opt));
  app.add_option("--clip-grad", o.clip_grad, "Clip the global gradient L2 norm to this (0: off)")
      ->capture_default_str()
      ->group(opt);
  app.add_option("--grad-accum-steps", o.grad_accum_steps, "Batches accumulated per optimizer step")
      ->capture_default_str()
      ->group(opt);
  app.add_option("--ema", o.ema, "Keep an exponential moving average of the weights with this decay (0: off)")
      ->capture_default_str()
      ->group(opt);
  app.add_option("--oom-policy", o.oom_policy,
                 "Out of GPU memory in a step: error, or split (retry the batch as 2, 4, ... micro-batches)")
      ->capture_default_str()
      ->group(opt);
  app.add_flag(
         "--cuda-graph", o.cuda_graph,
         "Capture the training step (forward, loss, backward, scaler, optimizer) into one CUDA graph after "
         "3 eager steps and replay it; steps where a graph cannot apply run eagerly, and the log says why")
      ->group(opt);

  const char* precision = "Precision";
  app.add_option("--amp", o.amp, "Mixed precision: off, fp16 (with loss scaling) or bf16 (GPU only)")
      ->capture_default_str()
      ->group(precision);
  app.add_option("--loss-scale", o.loss_scale, "fp16 loss scale: dynamic, or a fixed number")
      ->capture_default_str()
      ->group(precision);
  app.add_option("--tf32", o.tf32, "TensorFloat-32 for float32 matmuls and convolutions: on or off")
      ->capture_default_str()
      ->group(precision);

  const char* run = "Run";
  app.add_option("--device", o.device, "cpu or cuda:N (auto: cuda:0 when there is a GPU)")
      ->capture_default_str()
      ->group(run);
  app.add_option("--seed", o.seed, "Seed of weights, data order and augmentation")
      ->capture_default_str()
      ->group(run);
  app.add_flag("--deterministic", o.deterministic,
               "Bit-identical runs: deterministic cuDNN algorithms, no autotuning")
      ->group(run);
  app.add_option("--max-steps", o.max_steps, "Stop after this many optimizer steps (0: no limit)")
      ->capture_default_str()
      ->group(run);
  app.add_option("--eval-every", o.eval_every, "Evaluate every this many epochs (0: only at the end)")
      ->capture_default_str()
      ->group(run);
  app.add_flag("--evaluate-only", o.evaluate_only, "Evaluate --pretrained or --resume weights and exit")
      ->group(run);
  app.add_option("--eval-batches", o.eval_batches, "Evaluate on at most this many batches (0: all)")
      ->capture_default_str()
      ->group(run);
  app.add_option("--nproc-per-node", o.nproc_per_node, "GPUs: start this many ranks through nabla-run (DDP)")
      ->capture_default_str()
      ->group(run);

  const char* ckpt = "Checkpoints";
  app.add_option("--checkpoint-dir", o.checkpoint_dir,
                 "Checkpoints, metrics.jsonl and TensorBoard events go here (auto: runs/<data>-<arch>)")
      ->capture_default_str()
      ->group(ckpt);
  app.add_option("--save-every", o.save_every, "Save every this many steps (0: at the end of each epoch)")
      ->capture_default_str()
      ->group(ckpt);
  app.add_option("--keep-last", o.keep_last, "Keep this many step checkpoints (0: all); best is kept apart")
      ->capture_default_str()
      ->group(ckpt);
  app.add_option("--resume", o.resume, "auto (the newest valid checkpoint in --checkpoint-dir) or FILE")
      ->group(ckpt);

  const char* memory = "Memory";
  app.add_option("--memory-fraction", o.memory_fraction,
                 "Cap this process's GPU memory at this fraction of the device (0: no cap)")
      ->capture_default_str()
      ->group(memory);
  app.add_flag("--memory-report", o.memory_report,
               "Print the allocator's summary and peak by category at the end")
      ->group(memory);

  const char* output = "Output";
  app.add_option("--log-level", o.log_level, "trace, debug, info, warn, error or off")
      ->capture_default_str()
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "off"}))
      ->group(output);
  app.add_option("--progress", o.progress,
                 "auto (a bar on a terminal, timed lines otherwise), bar, lines or off")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "bar", "lines", "off"}))
      ->group(output);
  app.add_flag("--tensorboard", o.tensorboard, "TensorBoard event files in --checkpoint-dir (the default)")
      ->group(output);
  app.add_flag_callback(
         "--no-tensorboard", [&o] { o.tensorboard = false; }, "No TensorBoard event files")
      ->group(output);
}

}  // namespace nabla::train
