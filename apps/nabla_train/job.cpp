// nabla-train set-up: device and numerics, process group, data, model, optimization, outputs.
#include "nabla_train/job.h"

#include <filesystem>

#include "nabla/core/autograd/grad_mode.h"
#include "nabla/core/cuda/memory.h"
#include "nabla/core/cuda/runtime.h"
#include "nabla/core/generator.h"
#include "nabla/core/logging.h"
#include "nabla/core/memory_category.h"
#include "nabla/distributed/ddp.h"
#include "nabla/distributed/env.h"
#include "nabla/distributed/process_group_nccl.h"
#include "nabla/distributed/tcp_store.h"
#include "nabla/ops/factory.h"
#include "nabla_train/setup.h"
#if defined(NABLA_TRAIN_GLOO)
#include "nabla/distributed/gloo/process_group_gloo.h"
#endif

namespace nabla::train {

Job::Job(TrainOptions o) : options(std::move(o)) {}
Job::~Job() = default;

void Job::setup() {
  logger().set_level(spdlog::level::from_str(options.log_level));
  auto env = distributed::distributed_env();
  rank = env.rank;
  world_size = env.world_size;
  if (env.is_distributed() && options.device == "auto" && cuda::is_available())
    options.device = "cuda:" + std::to_string(env.local_rank);
  recipe = resolve_recipe(options);
  device = recipe.device;
  // The device first: NCCL binds a communicator to the device current when it is created.
  if (device.is_cuda()) {
    cuda::set_device(device.index);
    if (options.memory_fraction > 0) cuda::set_memory_fraction(options.memory_fraction, device.index);
  }
  if (env.is_distributed()) {
    logger().info("rank {} of {} (local {} of {}), from the {} environment; store at {}:{}", rank, world_size,
                  env.local_rank, env.local_world_size, env.source, env.master_addr, env.master_port);
    store = std::make_unique<distributed::TcpStore>(env.master_addr, static_cast<uint16_t>(env.master_port),
                                                    distributed::TcpStoreOptions{.is_server = rank == 0});
    group = make_process_group(*store);
  }
  if (!is_main()) logger().set_level(spdlog::level::warn);  // only rank 0 reports progress
  // Every rank draws the same initial weights; DDP also broadcasts rank 0's to be sure.
  manual_seed(options.seed);
  const bool tf32 = options.tf32 == "on" && !options.deterministic;
  routes_guard = std::make_unique<RoutesGuard>(Routes{.cudnn_benchmark = !options.deterministic,
                                                      .cudnn_deterministic = options.deterministic,
                                                      .conv_tf32 = tf32,
                                                      .matmul_tf32 = tf32});
  amp_dtype = options.amp == "fp16" ? kFloat16 : options.amp == "bf16" ? kBFloat16 : kFloat32;
  memory_format = options.channels_last ? MemoryFormat::ChannelsLast : MemoryFormat::Contiguous;

  NABLA_CHECK(
      options.oom_policy != "split" || (world_size == 1 && options.grad_accum_steps == 1),
      "--oom-policy split: works on one process without --grad-accum-steps (ranks would disagree on the "
      "split, and a retry would drop the batches accumulated before it)");
  build_data();
  build_model();
  loss_sum = zeros({}, {.dtype = kFloat32, .device = device});
  correct_sum = zeros({}, {.dtype = kFloat32, .device = device});
  build_scaler();  // the batch search's trial steps scale their loss too
  if (recipe.batch_size_auto) find_batch_size();
  // After the batch search, whose trial steps must not go through DDP's gradient hooks.
  if (group) ddp = std::make_unique<distributed::DistributedDataParallel>(*model, *group);
  build_train_loader();
  build_optimization();
  open_outputs();
}

// GPUs talk over NCCL, the CPU over Gloo (docs/distributed.md, "The CPU backend").
std::unique_ptr<distributed::ProcessGroup> Job::make_process_group(distributed::Store& on) const {
  if (device.is_cuda()) return distributed::make_nccl_process_group(on, rank, world_size);
#if defined(NABLA_TRAIN_GLOO)
  return std::make_unique<distributed::ProcessGroupGloo>(on, rank, world_size);
#else
  throw Error(fmt::format(
      "nabla-train with {} ranks on --device {}: data parallelism on the CPU runs over Gloo, and this "
      "nabla-train was built without it (cmake -DNABLA_APPS_GLOO=OFF, as the cuda preset builds it for "
      "GPU machines, or no libgloo-dev); train on GPUs, or build with the cpu or ci preset",
      world_size, options.device));
#endif
}

// What the training and validation loaders share: threads, prefetch depth, pinning, the bad-sample
// policy and the normalization into the model's layout.
data::DataLoaderOptions Job::loader_options(int64_t batch_size,
                                            std::shared_ptr<data::Sampler> sampler) const {
  return data::DataLoaderOptions{
      .batch_size = batch_size,
      .num_workers = recipe.workers,
      .prefetch = options.prefetch,
      .pin_memory = options.pin_memory && device.is_cuda(),
      .defer_decode = recipe.gpu_decode,
      .seed = options.seed,
      .on_bad_sample = options.on_bad_sample == "skip" ? data::OnBadSample::skip : data::OnBadSample::error,
      .sampler = std::move(sampler)};
}

data::NormalizeOptions Job::normalize_options() const {
  return {.mean = data.mean, .stddev = data.stddev, .dtype = kFloat32, .memory_format = memory_format};
}

void Job::build_data() {
  data = make_data(options, recipe);
  auto base = std::shared_ptr<data::Sampler>();
  if (world_size > 1) {
    base = std::make_shared<data::DistributedSampler>(
        data.train->size(),
        data::DistributedSamplerOptions{
            .rank = rank, .world_size = world_size, .shuffle = true, .seed = options.seed});
  } else {
    base = std::make_shared<data::RandomSampler>(data.train->size(), options.seed);
  }
  train_sampler = std::make_shared<ResumeSampler>(base);
  // Validation: every rank takes its shard (padded to equal sizes: a few samples count twice
  // when the set does not divide by the world size).
  std::shared_ptr<data::Sampler> val_sampler;
  if (world_size > 1) {
    val_sampler = std::make_shared<data::DistributedSampler>(
        data.val->size(),
        data::DistributedSamplerOptions{.rank = rank, .world_size = world_size, .shuffle = false});
  }
  val_batches = std::make_unique<BatchSource>(
      data.val, loader_options(std::max<int64_t>(recipe.batch_size, 64), val_sampler), normalize_options(),
      device);
}

void Job::build_train_loader() {
  auto loader = loader_options(recipe.batch_size, train_sampler);
  loader.drop_last = true;
  train_batches = std::make_unique<BatchSource>(data.train, loader, normalize_options(), device);
}

void Job::build_model() {
  MemoryCategoryScope tag(MemoryCategory::parameters);
  model = make_model(options, recipe, data.channels, data.num_classes);
  load_pretrained();
  model->to(device, memory_format);
}

void Job::build_scaler() {
  amp::GradScalerOptions scaler_options{.enabled = amp_dtype == kFloat16};
  if (options.loss_scale != "dynamic") {
    scaler_options.init_scale = std::stod(options.loss_scale);
    scaler_options.dynamic = false;
  }
  if (group) scaler_options.reduce_found_inf = distributed::agree_found_inf(*group);
  scaler = std::make_unique<amp::GradScaler>(scaler_options);
}

void Job::build_optimization() {
  optimizer = make_optimizer(options, recipe, *model);
  steps_per_epoch = train_batches->batches_per_epoch() / options.grad_accum_steps;
  NABLA_CHECK(steps_per_epoch > 0,
              "--batch-size {} x --grad-accum-steps {}: larger than the {} training images of this rank; "
              "not one step fits in an epoch",
              recipe.batch_size, options.grad_accum_steps, train_sampler->size());
  scheduler = make_scheduler(options, recipe, *optimizer, steps_per_epoch);
  if (options.ema > 0) {
    ema = std::make_unique<optim::ExponentialMovingAverage>(model->parameters(),
                                                            optim::EmaOptions{.decay = options.ema});
  }
  if (options.oom_policy == "split") {
    // A failed attempt leaves half-accumulated gradients and running sums; both go back.
    loss_at_step_start = zeros({}, {.dtype = kFloat32, .device = device});
    correct_at_step_start = zeros({}, {.dtype = kFloat32, .device = device});
    auto reset = [this] {
      optimizer->zero_grad();
      NoGradGuard no_grad;
      loss_sum.copy_(loss_at_step_start);
      correct_sum.copy_(correct_at_step_start);
    };
    splitter =
        std::make_unique<train_support::OomSplitter>(reset, train_support::OomSplitOptions{.device = device});
  }
}

void Job::open_outputs() {
  stop = std::make_unique<train_support::StopSignal>();
  if (!is_main()) return;
  checkpoints = std::make_unique<train_support::CheckpointDir>(
      recipe.checkpoint_dir, train_support::CheckpointDirOptions{.keep_last = options.keep_last});
  std::filesystem::create_directories(recipe.checkpoint_dir);
  const bool resuming = !options.resume.empty();
  metrics = std::make_unique<train_support::MetricsWriter>(
      (std::filesystem::path(recipe.checkpoint_dir) / "metrics.jsonl").string(),
      train_support::MetricsWriterOptions{.append = resuming});
  if (options.tensorboard)
    tensorboard = std::make_unique<train_support::TensorBoardWriter>(recipe.checkpoint_dir);
  if (options.progress != "off") {
    if (options.progress == "auto") {
      progress = std::make_unique<train_support::ProgressPrinter>(stderr);
    } else {
      progress = std::make_unique<train_support::ProgressPrinter>(stderr, options.progress == "bar");
    }
  }
}

}  // namespace nabla::train
