// `nabla-bench train`: training throughput and peak memory of a ResNet on synthetic data, the
// workload of ../shared/bench/torch_resnet50.py (and, with --nproc-per-node, of torch_ddp.py):
// one random batch reused every step, SGD lr 0.1 momentum 0.9 weight decay 1e-4, cuDNN
// benchmark on, 15 warm-up steps, then the timed steps between two synchronizations.
//
//   nabla-bench train --arch resnet50 --batch-size 256 --amp fp16 --channels-last
//   nabla-bench train --amp fp16 --channels-last --nproc-per-node 2     # DDP over NCCL
//   nabla-bench train --amp off,fp16,bf16 --layout nchw,channels-last --compare-pytorch
//   nabla-bench train --amp fp16 --channels-last --cuda-graph --compare-pytorch
//
// Comma lists in --amp and --layout give one row per combination, each on a fresh model with an
// emptied cache and its own peak memory (counted over the timed steps); a table of all rows comes
// last, and --json writes them as a list. --compare-pytorch then runs bench/pytorch/
// nabla_bench_torch.py for the same rows and adds nabla / PyTorch columns (torch_compare.h).
//
// With --nproc-per-node N the command starts itself N times through nabla-run (next to this
// binary); each rank trains on its own GPU under DistributedDataParallel and rank 0 prints the
// total. The timed loop has no host synchronization of its own: the only device-to-host read
// per step is the GradScaler's found-inf check (fp16).
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <memory>

#include "nabla/apps/train_support/relaunch.h"
#include "nabla/core/cuda/memory.h"
#include "nabla/core/cuda/runtime.h"
#include "nabla/core/cuda/stream.h"
#include "nabla/core/memory_category.h"
#include "nabla/data/data_loader.h"
#include "nabla/data/device_prefetcher.h"
#include "nabla/data/image/image_folder.h"
#include "nabla/distributed/ddp.h"
#include "nabla/distributed/env.h"
#include "nabla/distributed/process_group_nccl.h"
#include "nabla/distributed/tcp_store.h"
#include "nabla/nabla.h"
#include "nabla_bench/bench_common.h"
#include "nabla_bench/commands.h"
#include "nabla_bench/phase_timer.h"
#include "nabla_bench/plain_resnet.h"
#include "nabla_bench/table.h"
#include "nabla_bench/torch_compare.h"

namespace nabla::bench {
namespace {

struct TrainBenchOptions {
  std::string arch = "resnet50";
  int64_t batch_size = 256;
  std::string amp = "off";  // a comma list: one row per value (and per layout)
  std::string layout;       // a comma list of nchw, channels-last ("" : see resolve_layouts)
  bool channels_last = false;
  int steps = 40;
  int warmup = 15;
  int nproc_per_node = 1;
  double bucket_mb = 25;
  bool ddp = false;            // wrap in DDP even on one GPU (DDP's own cost, as torch_ddp.py's world 1)
  bool phase_times = false;    // forward / backward / optimizer times from CUDA events
  bool memory_report = false;  // the peak broken down by category (forward, backward, optimizer)
  std::string data_dir;        // an ImageFolder root (class folders of JPEGs); empty: one synthetic batch
  int workers = 16;
  std::string decode = "cpu";  // --data: cpu, gpu (nvJPEG) or auto
  int grad_checkpoint = 0;     // gradient checkpointing segments (0: off)
  bool plain = false;          // torchvision's structure written with plain layers (plain_resnet.h)
  double memory_fraction = 0;
  bool cuda_graph = false;     // capture the step once and replay it (nn::make_graphed_step)
  bool conv_bn_fusion = true;  // batch norms inside the convolutions (Routes::conv_batch_norm_fusion)
  TorchOptions torch;
  bool torch_compile = true;  // with --compare-pytorch, also torch.compile's rows
  std::string json_path;
};

// One table row's configuration.
struct TrainConfig {
  std::string amp;
  std::string layout;
};

// The process group of a DDP run (none on one GPU), shared by every row.
struct Distributed {
  distributed::DistributedEnv env;
  std::unique_ptr<distributed::TcpStore> store;
  std::unique_ptr<distributed::ProcessGroup> group;
};

// The model, its optimizer and scaler for one row. Everything is local to the row, so the next
// starts from an empty model and optimizer.
class Trainer {
 public:
  Trainer(const TrainBenchOptions& o, const TrainConfig& config, Distributed& dist, Device device)
      : device_(device),
        format_(memory_format_of(config.layout)),
        model_(make_tagged_model(o, device, format_)),
        opt_(model_->parameters(), {.lr = 0.1, .momentum = 0.9, .weight_decay = 1e-4}),
        scaler_(scaler_options(config, dist)),
        autocast_on_(config.amp != "off"),
        low_(autocast_dtype_of(config.amp)),
        graphed_(nn::make_graphed_step(
            [this](const Tensor& x, const Tensor& y) { return eager_step(x, y, nullptr); },
            {.warmup = kGraphWarmup,
             .enabled = o.cuda_graph,
             // The synthetic batch is one tensor reused every step.
             .adopt_inputs = o.data_dir.empty()})) {
    if (dist.group)
      ddp_ = std::make_unique<distributed::DistributedDataParallel>(
          *model_, *dist.group, distributed::DdpOptions{.bucket_cap_mb = o.bucket_mb});
  }

  // --cuda-graph: eager steps before the one that captures.
  static constexpr int kGraphWarmup = 3;

  MemoryFormat format() const { return format_; }
  const Tensor& loss() const { return loss_; }
  const nn::GraphedStep& graphed() const { return graphed_; }

  // One training step: through the graph with --cuda-graph (which runs the first steps
  // eagerly, then captures and replays), else eagerly with the phase marks.
  void step(const Tensor& x, const Tensor& y, PhaseTimer* timer) {
    if (timer == nullptr) {
      loss_ = graphed_(x, y);
    } else {
      loss_ = eager_step(x, y, timer);
    }
  }

 private:
  // Tagged for --memory-report: what forward allocates counts as activations, what backward
  // allocates (gradients and its temporaries) as gradients.
  Tensor eager_step(const Tensor& x, const Tensor& y, PhaseTimer* timer) {
    Tensor loss;
    opt_.zero_grad();
    {
      MemoryCategoryScope tag(MemoryCategory::activations);
      amp::Autocast autocast(device_, low_, autocast_on_);
      loss = cross_entropy(ddp_ ? (*ddp_)(x) : model_->forward(x), y);
    }
    if (timer) timer->mark();
    {
      MemoryCategoryScope tag(MemoryCategory::gradients);
      scaler_.scale(loss).backward();
    }
    if (timer) timer->mark();
    {
      MemoryCategoryScope tag(MemoryCategory::optimizer_state);
      scaler_.step(opt_);
      scaler_.update();
    }
    if (timer) timer->mark();
    return loss;
  }

  static std::shared_ptr<nn::Module> make_tagged_model(const TrainBenchOptions& o, Device device,
                                                       MemoryFormat format) {
    MemoryCategoryScope tag(MemoryCategory::parameters);
    NABLA_CHECK(!o.plain || o.grad_checkpoint == 0, "--plain and --grad-checkpoint do not go together");
    auto m = o.plain ? plain_resnet(o.arch) : make_model(o.arch, o.grad_checkpoint);
    m->to(device, format);
    return m;
  }
  static amp::GradScalerOptions scaler_options(const TrainConfig& config, Distributed& dist) {
    amp::GradScalerOptions options;
    options.enabled = config.amp == "fp16";
    if (dist.group) options.reduce_found_inf = distributed::agree_found_inf(*dist.group);
    return options;
  }

  Device device_;
  MemoryFormat format_;
  std::shared_ptr<nn::Module> model_;
  std::unique_ptr<distributed::DistributedDataParallel> ddp_;
  optim::SGD opt_;
  amp::GradScaler scaler_;
  bool autocast_on_;
  DType low_;
  nn::GraphedStep graphed_;
  Tensor loss_;
};

// The input: one synthetic batch reused every step (torch_resnet50.py's workload), or real JPEGs
// through the loader (decode + RandomResizedCrop + flip on worker threads, pinned batches) and
// the device prefetcher (upload + normalize on a copy stream), the data path training uses.
class BatchSource {
 public:
  BatchSource(const TrainBenchOptions& o, const distributed::DistributedEnv& env, Device device,
              MemoryFormat format)
      : o_(o),
        x_(randn({o.batch_size, 3, 224, 224}, {.device = device}).contiguous(format)),
        y_(randint(0, 1000, {o.batch_size}, {.dtype = kInt64, .device = device})) {
    if (o.data_dir.empty()) return;
    auto folder = std::make_shared<data::ImageFolder>(o.data_dir, data::imagenet_train_transform(224));
    gpu_decode_ = o.decode == "gpu";
    if (o.decode != "cpu") {
      const std::string why = data::gpu_decode_unavailable_reason();
      NABLA_CHECK(why.empty() || o.decode == "auto", "--decode gpu: {}", why);
      gpu_decode_ = why.empty();
    }
    loader_ = std::make_unique<data::DataLoader>(
        folder, data::DataLoaderOptions{.batch_size = o.batch_size,
                                        .shuffle = true,
                                        .drop_last = true,
                                        .num_workers = o.workers,
                                        .prefetch = 4,
                                        .pin_memory = true,
                                        .defer_decode = gpu_decode_,
                                        .seed = static_cast<uint64_t>(env.rank)});
    prefetcher_ = std::make_unique<data::DevicePrefetcher>(
        *loader_,
        data::PrefetchOptions{
            .device = env.local_rank, .depth = 2, .normalize = {.dtype = kFloat32, .memory_format = format}});
  }

  bool from_files() const { return prefetcher_ != nullptr; }
  bool gpu_decode() const { return gpu_decode_; }
  std::string decoder() const { return prefetcher_ ? prefetcher_->stats().decode_backend : ""; }
  const Tensor& x() const { return x_; }
  const Tensor& y() const { return y_; }
  double wait_seconds() const { return wait_; }
  double worst_wait_seconds() const { return worst_wait_; }
  void reset_waits() { wait_ = worst_wait_ = 0; }

  // Moves to the next batch (the synthetic batch stays).
  void next() {
    if (!prefetcher_) return;
    auto batch = prefetcher_->next();
    if (!batch) {  // the epoch ended: start the next one
      prefetcher_->start_epoch();
      batch = prefetcher_->next();
    }
    NABLA_CHECK(batch.has_value(), "--data {}: the folder gives no full batch of {}", o_.data_dir,
                o_.batch_size);
    x_ = batch->input;
    y_ = batch->target;
    wait_ += batch->wait_seconds;
    worst_wait_ = std::max(worst_wait_, batch->wait_seconds);
  }

 private:
  const TrainBenchOptions& o_;
  Tensor x_, y_;
  std::unique_ptr<data::DataLoader> loader_;
  std::unique_ptr<data::DevicePrefetcher> prefetcher_;
  bool gpu_decode_ = false;
  double wait_ = 0, worst_wait_ = 0;
};

// What the timed steps measured.
struct Timing {
  double seconds = 0;  // the slowest rank's
  uint64_t device_allocations = 0;
  size_t capture_peak_alloc = 0;  // --cuda-graph: the allocated peak of the capturing step
};

// The warm-up steps, then the timed ones between two synchronizations.
Timing time_steps(const TrainBenchOptions& o, Trainer& trainer, BatchSource& batches, Distributed& dist,
                  std::unique_ptr<PhaseTimer>& timer) {
  const auto& env = dist.env;
  auto step = [&] {
    if (timer) timer->begin_step();
    batches.next();
    trainer.step(batches.x(), batches.y(), timer.get());
  };
  Timing timing;
  for (int i = 0; i < o.warmup; ++i) {
    // A replay allocates nothing the allocator sees: with --cuda-graph the allocated peak is the
    // capture's, whose allocations are the step's own (the graph's pool keeps them).
    if (o.cuda_graph && i == Trainer::kGraphWarmup) cuda::reset_peak_memory_stats();
    step();
    if (o.cuda_graph && i == Trainer::kGraphWarmup) timing.capture_peak_alloc = cuda::max_memory_allocated();
  }
  cuda::synchronize();
  if (dist.group) dist.group->barrier()->wait();
  // Peaks count from here: the timed steps' own, as nabla_bench_torch.py counts them (reserved
  // memory then holds the graph's pool, the eager cache having been given back after the capture).
  cuda::reset_peak_memory_stats();
  batches.reset_waits();
  if (o.phase_times)
    timer = std::make_unique<PhaseTimer>(std::vector<std::string>{"forward", "backward", "optimizer"},
                                         o.steps, env.local_rank);
  const auto counts_before = cuda::allocator_counts(env.local_rank);
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < o.steps; ++i) step();
  cuda::synchronize();
  // The timed steps should take all their memory from the cache: a device allocation per step
  // would be a hidden cost (and a synchronization point).
  timing.device_allocations =
      cuda::allocator_counts(env.local_rank).device_allocations - counts_before.device_allocations;
  timing.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  // The slowest rank sets the pace of a synchronous job.
  if (dist.group) {
    Tensor t = full({1}, timing.seconds, {.dtype = kFloat64, .device = Device::cuda(env.local_rank)});
    dist.group->allreduce(t, distributed::ReduceOp::max)->wait();
    timing.seconds = t.item<double>();
  }
  return timing;
}

// Trains one configuration and returns its row (on every rank; rank 0's is reported).
nlohmann::json train_one(const TrainBenchOptions& o, const TrainConfig& config, Distributed& dist) {
  const auto& env = dist.env;
  const Device device = Device::cuda(env.local_rank);
  const bool channels_last = config.layout == "channels-last";
  manual_seed(0);
  Trainer trainer(o, config, dist, device);
  BatchSource batches(o, env, device, trainer.format());
  std::unique_ptr<PhaseTimer> timer;  // --phase-times, over the timed steps only
  const Timing timing = time_steps(o, trainer, batches, dist, timer);

  const int world = env.world_size;
  const double seconds = timing.seconds;
  const double ms = seconds * 1000.0 / o.steps;
  const double img_s = static_cast<double>(o.batch_size) * world * o.steps / seconds;
  const double peak_alloc = gib(std::max(cuda::max_memory_allocated(), timing.capture_peak_alloc));
  const double peak_reserved = gib(cuda::max_memory_reserved());
  const double wait_share = batches.wait_seconds() / seconds;
  const double final_loss = trainer.loss().item<double>();
  // Every rank's phases: a rank slower than the others sets the pace of all.
  if (timer) {
    std::printf("rank %d %s; %llu device allocations in the timed steps\n", env.rank, timer->report().c_str(),
                static_cast<unsigned long long>(timing.device_allocations));
  }
  const auto& graphed = trainer.graphed();
  const std::string graph_note = !o.cuda_graph ? "eager"
                                 : graphed.graphed()
                                     ? fmt::format("CUDA graph ({} replays)", graphed.replays())
                                     : "eager: " + graphed.eager_reason();
  if (env.rank == 0) {
    std::printf("step: %s\n", graph_note.c_str());
    if (o.cuda_graph) print_fusion_report(graphed);
    const std::string input =
        o.data_dir.empty()
            ? "synthetic batch"
            : fmt::format("JPEGs, {} workers, {} decode", o.workers,
                          batches.gpu_decode() ? "GPU (" + batches.decoder() + ")" : std::string("CPU"));
    std::printf(
        "%s train: world %d%s, batch %lld per GPU, amp %s, %s, %s: %.2f ms/step, %.1f img/s total, "
        "peak %.2f GiB allocated / %.2f GiB reserved (rank 0), loss %.4f\n",
        (o.arch + (o.plain ? " (plain)" : "")).c_str(), world, dist.group ? " (DDP)" : "",
        static_cast<long long>(o.batch_size), config.amp.c_str(), channels_last ? "channels_last" : "NCHW",
        input.c_str(), ms, img_s, peak_alloc, peak_reserved, final_loss);
    if (o.memory_report) std::printf("%s\n", memory_category_report(device).c_str());
    if (batches.from_files()) {
      std::printf("data wait (rank 0): %.2f ms/step on average, %.2f ms at worst, %.1f%% of step time\n",
                  batches.wait_seconds() * 1000 / o.steps, batches.worst_wait_seconds() * 1000,
                  100 * wait_share);
    }
  }
  return {{"bench", "train"},
          {"framework", "nabla"},
          {"arch", o.arch},
          {"plain", o.plain},
          {"world", world},
          {"batch", o.batch_size},
          {"amp", config.amp},
          {"layout", config.layout},
          {"channels_last", channels_last},
          {"steps", o.steps},
          {"warmup", o.warmup},
          {"ms_per_step", ms},
          {"img_s", img_s},
          {"img_s_total", img_s},
          {"peak_alloc_GiB", peak_alloc},
          {"peak_reserved_GiB", peak_reserved},
          {"loss", final_loss},
          {"bucket_mb", o.bucket_mb},
          {"ddp", dist.group != nullptr},
          {"device_allocations_timed", timing.device_allocations},
          {"phases", timer ? timer->summary() : nlohmann::json()},
          {"data", o.data_dir.empty() ? "synthetic" : o.data_dir},
          {"workers", o.workers},
          {"decode", batches.gpu_decode() ? "gpu" : "cpu"},
          {"data_wait_share", batches.from_files() ? wait_share : 0.0},
          {"grad_checkpoint", o.grad_checkpoint},
          {"memory_fraction", o.memory_fraction},
          {"cuda_graph", o.cuda_graph && graphed.graphed()},
          {"conv_bn_fusion", o.conv_bn_fusion},
          {"step_mode", graph_note}};
}

// Why --compare-pytorch cannot run for these options ("" when it can): the script measures one
// GPU on the synthetic batch, without checkpointing.
std::string torch_unsupported(const TrainBenchOptions& o, const Distributed& dist) {
  if (dist.env.is_distributed()) return "the PyTorch script measures one GPU (compare DDP with torch_ddp.py)";
  if (!o.data_dir.empty()) return "the PyTorch script measures the synthetic batch only, not --data";
  if (o.grad_checkpoint > 0) return "the PyTorch script has no checkpointing (compare with torch_ckpt.py)";
  return "";
}

std::vector<std::string> torch_args(const TrainBenchOptions& o) {
  std::vector<std::string> args = {
      "train",
      "--arch",
      o.arch,
      "--batch-size",
      std::to_string(o.batch_size),
      "--amp",
      o.amp,
      "--steps",
      std::to_string(o.steps),
      "--warmup",
      std::to_string(o.warmup),
      "--layout",
      fmt::format("{}", fmt::join(resolve_layouts(o.layout, o.channels_last), ","))};
  if (o.memory_fraction > 0) {
    args.push_back("--memory-fraction");
    args.push_back(fmt::format("{}", o.memory_fraction));
  }
  return args;
}

void print_train_table(const TrainBenchOptions& o, const std::vector<nlohmann::json>& rows, bool with_torch,
                       bool with_compile) {
  std::vector<std::string> headers = {"amp",   "layout",         "ms/step",
                                      "img/s", "peak alloc GiB", "peak reserved GiB"};
  if (with_torch) {
    for (const char* h : {"torch img/s", "img/s ratio", "torch alloc GiB", "alloc ratio",
                          "torch reserved GiB", "reserved ratio"})
      headers.emplace_back(h);
  }
  if (with_compile) {
    for (const char* h :
         {"compile img/s", "img/s ratio vs compile", "compile alloc GiB", "alloc ratio vs compile"})
      headers.emplace_back(h);
  }
  Table table(headers);
  for (const auto& row : rows) {
    std::vector<std::string> cells = {row["amp"].get<std::string>(),
                                      row["layout"].get<std::string>(),
                                      format_number(number_at(row, "ms_per_step"), 2),
                                      format_number(number_at(row, "img_s"), 1),
                                      format_number(number_at(row, "peak_alloc_GiB"), 2),
                                      format_number(number_at(row, "peak_reserved_GiB"), 2)};
    if (with_torch) {
      for (std::string metric : {"img_s", "peak_alloc_GiB", "peak_reserved_GiB"}) {
        cells.push_back(format_number(number_at(row, "torch_" + metric), metric == "img_s" ? 1 : 2));
        cells.push_back(format_number(number_at(row, "ratio_" + metric), 3));
      }
    }
    if (with_compile) {
      for (std::string metric : {"img_s", "peak_alloc_GiB"}) {
        cells.push_back(format_number(number_at(row, "compile_" + metric), metric == "img_s" ? 1 : 2));
        cells.push_back(format_number(number_at(row, "compile_ratio_" + metric), 3));
      }
    }
    table.add_row(std::move(cells));
  }
  const int world = rows.empty() ? 1 : rows[0]["world"].get<int>();
  std::printf("\n%s train, batch %lld per GPU, world %d, %d warm-up + %d timed steps%s%s%s\n%s",
              o.arch.c_str(), static_cast<long long>(o.batch_size), world, o.warmup, o.steps,
              o.cuda_graph ? ", --cuda-graph" : "", o.conv_bn_fusion ? "" : ", --no-conv-bn-fusion",
              with_torch ? "; ratio = nabla / PyTorch (eager, and torch.compile where shown)" : "",
              table.render().c_str());
}

void run_train(const TrainBenchOptions& o) {
  NABLA_CHECK(
      !o.cuda_graph || o.warmup > Trainer::kGraphWarmup,
      "--cuda-graph needs --warmup {} or more: the first {} steps run eagerly and the next one captures, "
      "all before the timed steps (got --warmup {})",
      Trainer::kGraphWarmup + 1, Trainer::kGraphWarmup, o.warmup);
  NABLA_CHECK(
      !o.cuda_graph || (!o.ddp && o.nproc_per_node == 1),
      "--cuda-graph does not capture DistributedDataParallel yet (its collectives are queued by a launcher "
      "thread outside the capture); drop --ddp/--nproc-per-node or --cuda-graph");
  const auto amps = parse_choices(o.amp, "--amp", amp_choices());
  const auto layouts = resolve_layouts(o.layout, o.channels_last);
  NABLA_CHECK(cuda::is_available(), "nabla-bench train needs a CUDA device, and none was found");
  Distributed dist;
  dist.env = distributed::distributed_env();
  const auto& env = dist.env;
  cuda::set_device(env.local_rank);
  apply_memory_fraction(o.memory_fraction);
  if (env.is_distributed()) {
    dist.store =
        std::make_unique<distributed::TcpStore>(env.master_addr, static_cast<uint16_t>(env.master_port),
                                                distributed::TcpStoreOptions{.is_server = env.rank == 0});
    dist.group = distributed::make_nccl_process_group(*dist.store, env.rank, env.world_size);
  } else if (o.ddp) {
    // One rank: a private store on a free local port, and a communicator of one.
    dist.store = std::make_unique<distributed::TcpStore>("127.0.0.1", uint16_t{0},
                                                         distributed::TcpStoreOptions{.is_server = true});
    dist.group = distributed::make_nccl_process_group(*dist.store, 0, 1);
  }
  // The flags' routes, one value for every run below.
  const RoutesGuard routes({.cudnn_benchmark = true, .conv_batch_norm_fusion = o.conv_bn_fusion});

  std::vector<nlohmann::json> rows;
  for (const auto& amp : amps) {
    for (const auto& layout : layouts) {
      with_oom_context(fmt::format("{} train batch {} amp {} {}", o.arch, o.batch_size, amp, layout),
                       o.memory_fraction, [&] {
                         rows.push_back(train_one(o, {amp, layout}, dist));
                       });
      // The next row starts from an empty cache, and counts its own peaks.
      cuda::synchronize();
      cuda::empty_cache();
      if (env.rank == 0) std::printf("%s\n", rows.back().dump().c_str());
    }
  }
  if (env.rank != 0) return;

  bool with_torch = false, with_compile = false;
  if (o.torch.enabled) {
    if (auto why = torch_unsupported(o, dist); !why.empty()) {
      std::printf("PyTorch comparison skipped: %s\n", why.c_str());
    } else {
      auto torch = run_torch_script(o.torch, torch_args(o));
      if (!torch.skipped.empty()) {
        std::printf("PyTorch comparison skipped: %s\n", torch.skipped.c_str());
      } else {
        attach_torch_rows(rows, torch.rows, {"arch", "batch", "amp", "layout"},
                          {"img_s", "peak_alloc_GiB", "peak_reserved_GiB"});
        with_torch = true;
        if (o.torch_compile) {
          auto args = torch_args(o);
          args.push_back("--compile");
          auto compiled = run_torch_script(o.torch, args);
          if (!compiled.skipped.empty()) {
            std::printf("torch.compile comparison skipped: %s\n", compiled.skipped.c_str());
          } else {
            attach_torch_rows(rows, compiled.rows, {"arch", "batch", "amp", "layout"},
                              {"img_s", "peak_alloc_GiB"}, "compile");
            with_compile = true;
          }
        }
      }
    }
  }
  print_train_table(o, rows, with_torch, with_compile);
  write_json_rows(o.json_path, rows);
}

}  // namespace

void add_train_command(CLI::App& app, int argc, char** argv) {
  auto o = std::make_shared<TrainBenchOptions>();
  auto* cmd = app.add_subcommand("train",
                                 "ResNet training throughput and peak memory on synthetic data "
                                 "(the workload of torch_resnet50.py / torch_ddp.py)");
  cmd->add_option("--arch", o->arch,
                  "resnet18|34|50|101|152, or "
                  "mobilenet_v2|mobilenet_v3_large|mobilenet_v3_small|efficientnet_b0|vit_b_16")
      ->capture_default_str();
  cmd->add_option("--batch-size", o->batch_size, "Images per GPU per step")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--amp", o->amp,
                  "Mixed precision, a comma list of off, fp16 (with a GradScaler) and bf16: one row each")
      ->capture_default_str();
  cmd->add_option("--layout", o->layout,
                  "A comma list of nchw and channels-last: one row each (default nchw)");
  cmd->add_flag("--channels-last", o->channels_last,
                "Model and batch in NHWC (same as --layout channels-last)");
  cmd->add_option("--steps", o->steps, "Timed steps")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--warmup", o->warmup, "Untimed steps first (cuDNN autotuning, allocator warm-up)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--nproc-per-node", o->nproc_per_node,
                  "GPUs: start this many ranks through nabla-run (DDP)")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  cmd->add_flag(
      "--ddp", o->ddp,
      "Wrap the model in DDP over NCCL even on one GPU, to measure DDP's own cost (as torch_ddp.py's "
      "world 1)");
  cmd->add_flag("--phase-times", o->phase_times,
                "Also report the device and host time of each step's forward, backward and optimizer "
                "phases (CUDA events; no added synchronization)");
  cmd->add_flag("--memory-report", o->memory_report,
                "Also print the timed steps' peak broken down by what was allocated in forward "
                "(activations), backward (gradients) and the optimizer step");
  cmd->add_option("--bucket-mb", o->bucket_mb, "DDP gradient bucket size in MB")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--data", o->data_dir,
                  "Train on the JPEGs of this ImageFolder root (class folders) through the loader and the "
                  "device prefetcher, and report the time each step waited for data (default: one synthetic "
                  "batch reused every step)");
  cmd->add_option("--workers", o->workers, "Loader threads per rank with --data")
      ->capture_default_str()
      ->check(CLI::Range(1, 256));
  cmd->add_option(
         "--decode", o->decode,
         "With --data: cpu (workers decode), gpu (workers read files; nvJPEG decodes on the GPU), or "
         "auto (gpu where nvJPEG is available)")
      ->capture_default_str()
      ->check(CLI::IsMember({"cpu", "gpu", "auto"}));
  cmd->add_option("--grad-checkpoint", o->grad_checkpoint,
                  "Gradient checkpointing: split the network into this many segments (0: off)")
      ->capture_default_str()
      ->check(CLI::Range(0, 64));
  add_memory_fraction_flag(cmd, o->memory_fraction);
  auto* graph_flag = cmd->add_flag(
      "--cuda-graph", o->cuda_graph,
      "Capture the whole training step (forward, loss, backward, scaler, SGD) into one CUDA graph after 3 "
      "eager steps and replay it (nn::make_graphed_step); the peaks then count from the capture");
  cmd->get_option("--phase-times")->excludes(graph_flag);
  cmd->add_flag(
      "--plain", o->plain,
      "Train the ResNet as torchvision writes it, with plain layers (relu(bn(conv(x)))) instead of the "
      "model zoo's hand-fused forward; with --cuda-graph the step compiler fuses it");
  cmd->add_flag("!--no-conv-bn-fusion", o->conv_bn_fusion,
                "Run the batch norms between convolutions as separate kernels instead of inside the "
                "convolutions (cuDNN's fusion engines; float16 channels_last only), for comparison");
  add_torch_flags(cmd, o->torch);
  cmd->add_flag("!--no-torch-compile", o->torch_compile,
                "With --compare-pytorch, skip the torch.compile run (it compiles for a minute or more)");
  cmd->add_option("--json", o->json_path, "Also write the rows as a JSON list to this file");
  cmd->callback([o, argc, argv] {
    if (o->nproc_per_node > 1 && !distributed::distributed_env().is_distributed()) {
      train_support::relaunch_under_nabla_run(o->nproc_per_node, argc, argv);
    }
    run_train(*o);
  });
}

}  // namespace nabla::bench
