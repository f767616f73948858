// `nabla-bench train`: training throughput and peak memory of a ResNet on synthetic data, the
// workload of ../shared/bench/torch_resnet50.py (and, with --nproc-per-node, of torch_ddp.py):
// one random batch reused every step, SGD lr 0.1 momentum 0.9 weight decay 1e-4, cuDNN
// benchmark on, 15 warm-up steps, then the timed steps between two synchronizations.
//
//   nabla-bench train --arch resnet50 --batch-size 256 --amp fp16 --channels-last
//   nabla-bench train --amp fp16 --channels-last --nproc-per-node 2     # DDP over NCCL
//
// With --nproc-per-node N the command starts itself N times through nabla-run (next to this
// binary); each rank trains on its own GPU under DistributedDataParallel and rank 0 prints the
// total. The timed loop has no host synchronization of its own: the only device-to-host read
// per step is the GradScaler's found-inf check (fp16).
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>

#include "nabla/core/cuda/memory.h"
#include "nabla/core/cuda/runtime.h"
#include "nabla/core/cuda/stream.h"
#include "nabla/data/data_loader.h"
#include "nabla/data/device_prefetcher.h"
#include "nabla/data/image/image_folder.h"
#include "nabla/distributed/ddp.h"
#include "nabla/distributed/env.h"
#include "nabla/distributed/process_group_nccl.h"
#include "nabla/distributed/tcp_store.h"
#include "nabla/nabla.h"
#include "nabla_bench/commands.h"

namespace nabla::bench {
namespace {

struct TrainBenchOptions {
  std::string arch = "resnet50";
  int64_t batch_size = 256;
  std::string amp = "off";
  bool channels_last = false;
  int steps = 40;
  int warmup = 15;
  int nproc_per_node = 1;
  double bucket_mb = 25;
  std::string data_dir;  // an ImageFolder root (class folders of JPEGs); empty: one synthetic batch
  int workers = 16;
  int grad_checkpoint = 0;  // gradient checkpointing segments (0: off)
  std::string json_path;
};

std::shared_ptr<nn::Module> make_model(const std::string& arch, int checkpoint_segments) {
  const nn::models::ResNetOptions options{.num_classes = 1000, .checkpoint_segments = checkpoint_segments};
  if (arch == "resnet18") return nn::models::resnet18(options);
  if (arch == "resnet34") return nn::models::resnet34(options);
  if (arch == "resnet50") return nn::models::resnet50(options);
  if (arch == "resnet101") return nn::models::resnet101(options);
  if (arch == "resnet152") return nn::models::resnet152(options);
  throw Error("--arch must be resnet18, resnet34, resnet50, resnet101 or resnet152, got '" + arch + "'");
}

double gib(size_t bytes) {
  return static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0);
}

// Re-runs this command as N ranks through nabla-run, dropping --nproc-per-node.
int relaunch(int nproc, int argc, char** argv) {
  auto self = std::filesystem::read_symlink("/proc/self/exe");
  auto launcher = self.parent_path() / "nabla-run";
  if (!std::filesystem::exists(launcher)) launcher = "nabla-run";  // from PATH
  std::vector<std::string> args = {launcher.string(), "--nproc-per-node", std::to_string(nproc), "--",
                                   self.string()};
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--nproc-per-node") {
      ++i;
      continue;
    }
    if (a.rfind("--nproc-per-node=", 0) == 0) continue;
    args.push_back(a);
  }
  std::vector<char*> cargs;
  for (auto& a : args) cargs.push_back(a.data());
  cargs.push_back(nullptr);
  ::execvp(cargs[0], cargs.data());
  throw Error("cannot start nabla-run (" + launcher.string() + "): " + std::strerror(errno));
}

void run_train(const TrainBenchOptions& o) {
  NABLA_CHECK(cuda::is_available(), "nabla-bench train needs a CUDA device");
  NABLA_CHECK(o.amp == "off" || o.amp == "fp16" || o.amp == "bf16",
              "--amp must be off, fp16 or bf16, got '{}'", o.amp);
  auto env = distributed::distributed_env();
  cuda::set_device(env.local_rank);
  const Device device = Device::cuda(env.local_rank);

  std::unique_ptr<distributed::TcpStore> store;
  std::unique_ptr<distributed::ProcessGroupNccl> group;
  if (env.is_distributed()) {
    store = std::make_unique<distributed::TcpStore>(env.master_addr, static_cast<uint16_t>(env.master_port),
                                                    distributed::TcpStoreOptions{.is_server = env.rank == 0});
    group = std::make_unique<distributed::ProcessGroupNccl>(*store, env.rank, env.world_size);
  }

  set_cudnn_benchmark(true);
  manual_seed(0);
  const MemoryFormat format = o.channels_last ? MemoryFormat::ChannelsLast : MemoryFormat::Contiguous;
  auto model = make_model(o.arch, o.grad_checkpoint);
  model->to(device, format);
  std::unique_ptr<distributed::DistributedDataParallel> ddp;
  if (group)
    ddp = std::make_unique<distributed::DistributedDataParallel>(
        *model, *group, distributed::DdpOptions{.bucket_cap_mb = o.bucket_mb});
  optim::SGD opt(model->parameters(), {.lr = 0.1, .momentum = 0.9, .weight_decay = 1e-4});
  const bool autocast_on = o.amp != "off";
  const DType low = o.amp == "bf16" ? kBFloat16 : kFloat16;
  amp::GradScalerOptions scaler_options{.enabled = o.amp == "fp16"};
  if (group) scaler_options.reduce_found_inf = distributed::agree_found_inf(*group);
  amp::GradScaler scaler(scaler_options);

  // Input: one synthetic batch reused every step (torch_resnet50.py's workload), or real JPEGs
  // through the loader (decode + RandomResizedCrop + flip on worker threads, pinned batches)
  // and the device prefetcher (upload + normalize on a copy stream), the data path training uses.
  Tensor x = randn({o.batch_size, 3, 224, 224}, {.device = device}).contiguous(format);
  Tensor y = randint(0, 1000, {o.batch_size}, {.dtype = kInt64, .device = device});
  std::unique_ptr<data::DataLoader> loader;
  std::unique_ptr<data::DevicePrefetcher> prefetcher;
  if (!o.data_dir.empty()) {
    auto folder = std::make_shared<data::ImageFolder>(o.data_dir, data::imagenet_train_transform(224));
    loader = std::make_unique<data::DataLoader>(
        folder, data::DataLoaderOptions{.batch_size = o.batch_size,
                                        .shuffle = true,
                                        .drop_last = true,
                                        .num_workers = o.workers,
                                        .prefetch = 4,
                                        .pin_memory = true,
                                        .seed = static_cast<uint64_t>(env.rank)});
    prefetcher = std::make_unique<data::DevicePrefetcher>(
        *loader,
        data::PrefetchOptions{
            .device = env.local_rank, .depth = 2, .normalize = {.dtype = kFloat32, .memory_format = format}});
  }
  double data_wait = 0, worst_wait = 0;
  auto next_batch = [&] {
    if (!prefetcher) return;
    auto batch = prefetcher->next();
    if (!batch) {  // the epoch ended: start the next one
      prefetcher->start_epoch();
      batch = prefetcher->next();
    }
    NABLA_CHECK(batch.has_value(), "--data {}: the folder gives no full batch of {}", o.data_dir,
                o.batch_size);
    x = batch->input;
    y = batch->target;
    data_wait += batch->wait_seconds;
    worst_wait = std::max(worst_wait, batch->wait_seconds);
  };
  Tensor loss;
  auto step = [&] {
    next_batch();
    opt.zero_grad();
    {
      amp::Autocast autocast(device, low, autocast_on);
      loss = cross_entropy(ddp ? (*ddp)(x) : model->forward(x), y);
    }
    scaler.scale(loss).backward();
    scaler.step(opt);
    scaler.update();
  };

  for (int i = 0; i < o.warmup; ++i) step();
  cuda::synchronize();
  if (group) group->barrier()->wait();
  cuda::reset_peak_memory_stats();
  data_wait = worst_wait = 0;
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < o.steps; ++i) step();
  cuda::synchronize();
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  // The slowest rank sets the pace of a synchronous job.
  if (group) {
    Tensor t = full({1}, seconds, {.dtype = kFloat64, .device = device});
    group->allreduce(t, distributed::ReduceOp::max)->wait();
    seconds = t.item<double>();
  }
  const int world = env.world_size;
  const double ms = seconds * 1000.0 / o.steps;
  const double img_s = static_cast<double>(o.batch_size) * world * o.steps / seconds;
  const double peak_alloc = gib(cuda::max_memory_allocated());
  const double peak_reserved = gib(cuda::max_memory_reserved());
  if (env.rank != 0) return;
  const double wait_share = data_wait / seconds;
  const std::string input =
      o.data_dir.empty() ? "synthetic batch" : fmt::format("JPEGs, {} workers", o.workers);
  std::printf(
      "%s train: world %d, batch %lld per GPU, amp %s, %s, %s: %.2f ms/step, %.1f img/s total, "
      "peak %.2f GiB allocated / %.2f GiB reserved (rank 0), loss %.4f\n",
      o.arch.c_str(), world, static_cast<long long>(o.batch_size), o.amp.c_str(),
      o.channels_last ? "channels_last" : "NCHW", input.c_str(), ms, img_s, peak_alloc, peak_reserved,
      loss.item<double>());
  if (prefetcher) {
    std::printf("data wait (rank 0): %.2f ms/step on average, %.2f ms at worst, %.1f%% of step time\n",
                data_wait * 1000 / o.steps, worst_wait * 1000, 100 * wait_share);
  }
  nlohmann::json j = {{"bench", "train"},
                      {"arch", o.arch},
                      {"world", world},
                      {"batch", o.batch_size},
                      {"amp", o.amp},
                      {"channels_last", o.channels_last},
                      {"steps", o.steps},
                      {"warmup", o.warmup},
                      {"ms_per_step", ms},
                      {"img_s_total", img_s},
                      {"peak_alloc_GiB", peak_alloc},
                      {"peak_reserved_GiB", peak_reserved},
                      {"bucket_mb", o.bucket_mb},
                      {"data", o.data_dir.empty() ? "synthetic" : o.data_dir},
                      {"workers", o.workers},
                      {"data_wait_share", prefetcher ? wait_share : 0.0},
                      {"grad_checkpoint", o.grad_checkpoint}};
  std::printf("%s\n", j.dump().c_str());
  if (!o.json_path.empty()) std::ofstream(o.json_path) << j.dump(2) << "\n";
}

}  // namespace

void add_train_command(CLI::App& app, int argc, char** argv) {
  auto o = std::make_shared<TrainBenchOptions>();
  auto* cmd = app.add_subcommand("train",
                                 "ResNet training throughput and peak memory on synthetic data "
                                 "(the workload of torch_resnet50.py / torch_ddp.py)");
  cmd->add_option("--arch", o->arch, "resnet18|34|50|101|152")->capture_default_str();
  cmd->add_option("--batch-size", o->batch_size, "Images per GPU per step")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--amp", o->amp, "Mixed precision: off, fp16 (with a GradScaler) or bf16")
      ->capture_default_str();
  cmd->add_flag("--channels-last", o->channels_last, "Model and batch in NHWC");
  cmd->add_option("--steps", o->steps, "Timed steps")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--warmup", o->warmup, "Untimed steps first (cuDNN autotuning, allocator warm-up)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--nproc-per-node", o->nproc_per_node,
                  "GPUs: start this many ranks through nabla-run (DDP)")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
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
  cmd->add_option("--grad-checkpoint", o->grad_checkpoint,
                  "Gradient checkpointing: split the network into this many segments (0: off)")
      ->capture_default_str()
      ->check(CLI::Range(0, 64));
  cmd->add_option("--json", o->json_path, "Also write the result as JSON to this file");
  cmd->callback([o, argc, argv] {
    if (o->nproc_per_node > 1 && !distributed::distributed_env().is_distributed()) {
      relaunch(o->nproc_per_node, argc, argv);
    }
    run_train(*o);
  });
}

}  // namespace nabla::bench
