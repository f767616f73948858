// The parts of one nabla-train run, shared by the files that implement it: job.cpp (set-up),
// train_loop.cpp (epochs and steps), evaluate.cpp, checkpoint_state.cpp (save and resume).
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>

#include "nabla/amp/grad_scaler.h"
#include "nabla/apps/train_support/checkpoint_dir.h"
#include "nabla/apps/train_support/metrics_writer.h"
#include "nabla/apps/train_support/oom_split.h"
#include "nabla/apps/train_support/progress.h"
#include "nabla/apps/train_support/stop_signal.h"
#include "nabla/apps/train_support/tensorboard_writer.h"
#include "nabla/nn/graphed_step.h"
#include "nabla/nn/module.h"
#include "nabla/ops/routes.h"
#include "nabla/optim/ema.h"
#include "nabla/optim/optimizer.h"
#include "nabla/optim/scheduler.h"
#include "nabla_train/batches.h"
#include "nabla_train/datasets.h"
#include "nabla_train/options.h"
#include "nabla_train/trainer.h"

namespace nabla::distributed {
class DistributedDataParallel;
class ProcessGroup;
class Store;
class TcpStore;
}  // namespace nabla::distributed

namespace nabla::train {

struct Job {
  explicit Job(TrainOptions options);
  ~Job();

  // --- set-up (job.cpp) ---
  void setup();
  std::unique_ptr<distributed::ProcessGroup> make_process_group(distributed::Store& on) const;
  void build_data();
  void build_train_loader();
  data::DataLoaderOptions loader_options(int64_t batch_size, std::shared_ptr<data::Sampler> sampler) const;
  data::NormalizeOptions normalize_options() const;
  void build_model();
  // --batch-size auto: the largest batch whose training step fits, by trial steps.
  void find_batch_size();
  void build_scaler();
  void build_optimization();
  void open_outputs();
  bool is_main() const { return rank == 0; }

  // --- the loop (train_loop.cpp) ---
  int train();
  // One optimizer step's worth of work on one batch: forward, backward, and (on the last batch of
  // an accumulation group) the update. Loss and correct counts accumulate in device tensors.
  void train_batch(const TrainBatch& batch, bool update);
  // Returns the weighted loss, detached.
  Tensor forward_backward(const Tensor& input, const Tensor& target, double weight);
  // The device part of an update (clipping, scaler, optimizer, zero_grad): what a CUDA graph holds.
  void optimizer_update();
  // The host part after it (the schedule, the EMA), which a graph would freeze.
  void after_update();
  // --cuda-graph: the graphed step, or "" with why this run cannot have one (then null).
  std::string build_graphed_step();
  Tensor forward(const Tensor& input);

  // --- evaluation (evaluate.cpp) ---
  EvalResult evaluate();
  // The model's logits for an evaluation batch; with --oom-policy split, a batch that runs out of
  // memory is evaluated in halves, quarters, ... (and the split is kept).
  Tensor eval_logits(const Tensor& input);
  int eval_split = 1;

  // --- checkpoints (checkpoint_state.cpp) ---
  std::map<std::string, Tensor> state_tensors() const;
  std::map<std::string, std::string> state_metadata() const;
  void save_checkpoint(bool best = false);
  // Loads --resume (auto or a file) if given; returns whether a checkpoint was loaded.
  bool resume();
  void load_pretrained();

  TrainOptions options;
  // The job's routes (determinism, TF32, cuDNN benchmark), in force while it lives.
  std::unique_ptr<RoutesGuard> routes_guard;
  Recipe recipe;
  Device device;
  int rank = 0;
  int world_size = 1;
  DType amp_dtype = kFloat32;  // kFloat16 / kBFloat16 under autocast
  MemoryFormat memory_format = MemoryFormat::Contiguous;

  TrainData data;
  std::shared_ptr<ResumeSampler> train_sampler;
  std::unique_ptr<BatchSource> train_batches;
  std::unique_ptr<BatchSource> val_batches;
  int64_t steps_per_epoch = 0;

  std::shared_ptr<nn::Module> model;
  std::unique_ptr<distributed::TcpStore> store;
  std::unique_ptr<distributed::ProcessGroup> group;
  std::unique_ptr<distributed::DistributedDataParallel> ddp;
  std::unique_ptr<optim::Optimizer> optimizer;
  std::unique_ptr<optim::LRScheduler> scheduler;
  std::unique_ptr<amp::GradScaler> scaler;
  std::unique_ptr<optim::ExponentialMovingAverage> ema;
  std::unique_ptr<train_support::OomSplitter> splitter;  // --oom-policy split
  std::unique_ptr<nn::GraphedStep> graphed_step;         // --cuda-graph (forward_backward + optimizer_update)

  std::unique_ptr<train_support::CheckpointDir> checkpoints;
  std::unique_ptr<train_support::MetricsWriter> metrics;
  std::unique_ptr<train_support::TensorBoardWriter> tensorboard;
  std::unique_ptr<train_support::ProgressPrinter> progress;
  std::unique_ptr<train_support::StopSignal> stop;

  RunPosition position;
  // Running sums of the epoch on the device (no per-step host reads).
  Tensor loss_sum, correct_sum;
  Tensor loss_at_step_start, correct_at_step_start;  // for --oom-policy split's retries
  int64_t samples_in_epoch = 0;
};

}  // namespace nabla::train
