// Benchmark: ResNet-50 training throughput on synthetic data, the workload of
// /work/shared/bench/torch_resnet50.py (random 224x224 batch reused every step, 1000 classes,
// SGD lr 0.1 momentum 0.9 weight decay 1e-4, cuDNN benchmark on), so the two print comparable
// numbers on the same GPU:
//
//   nabla_bench_resnet_train --batch 256 --amp fp16 --channels-last --steps 40 --warmup 15
//
// --amp off|fp16|bf16 picks autocast (fp16 adds a GradScaler, as torch's amp16 mode does);
// --channels-last moves the model and the batch to NHWC. The timed loop has no host sync of its
// own: the only device-to-host read per step is the GradScaler's found-inf check (fp16). Time
// is taken between two CUDA events around all timed steps, as the PyTorch script does.
// Prints a readable line and one line of JSON.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "nabla/core/cuda/memory.h"
#include "nabla/core/cuda/stream.h"
#include "nabla/nabla.h"

namespace nb = nabla;

namespace {

struct Flags {
  int64_t batch = 256;
  std::string amp = "off";
  bool channels_last = false;
  int steps = 40;
  int warmup = 15;
};

[[noreturn]] void usage(const char* problem) {
  std::fprintf(stderr,
               "%s\nusage: nabla_bench_resnet_train [--batch N] [--amp off|fp16|bf16] [--channels-last] "
               "[--steps N] [--warmup N]\n",
               problem);
  std::exit(2);
}

int64_t positive(const char* flag, const char* value) {
  char* end = nullptr;
  const long long v = std::strtoll(value, &end, 10);
  if (end == value || *end != '\0' || v <= 0)
    usage((std::string(flag) + " needs a positive integer").c_str());
  return v;
}

Flags parse(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> const char* {
      if (i + 1 >= argc) usage((arg + " needs a value").c_str());
      return argv[++i];
    };
    if (arg == "--batch") {
      f.batch = positive("--batch", value());
    } else if (arg == "--amp") {
      f.amp = value();
      if (f.amp != "off" && f.amp != "fp16" && f.amp != "bf16") usage("--amp takes off, fp16 or bf16");
    } else if (arg == "--channels-last") {
      f.channels_last = true;
    } else if (arg == "--steps") {
      f.steps = static_cast<int>(positive("--steps", value()));
    } else if (arg == "--warmup") {
      f.warmup = static_cast<int>(positive("--warmup", value()));
    } else {
      usage(("unknown flag " + arg).c_str());
    }
  }
  return f;
}

double gib(size_t bytes) {
  return static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0);
}

}  // namespace

int main(int argc, char** argv) {
  const Flags flags = parse(argc, argv);
  if (!nb::cuda::is_available()) {
    std::fprintf(stderr, "no CUDA device\n");
    return 1;
  }
  const nb::Device device = nb::Device::cuda(0);
  const nb::RoutesGuard routes_guard({.cudnn_benchmark = true});
  nb::manual_seed(0);
  const nb::MemoryFormat format =
      flags.channels_last ? nb::MemoryFormat::ChannelsLast : nb::MemoryFormat::Contiguous;

  auto model = nb::nn::models::resnet50({.num_classes = 1000});
  model->to(device, format);
  nb::optim::SGD opt(model->parameters(), {.lr = 0.1, .momentum = 0.9, .weight_decay = 1e-4});
  const bool autocast_on = flags.amp != "off";
  const nb::DType low = flags.amp == "bf16" ? nb::kBFloat16 : nb::kFloat16;
  nb::amp::GradScaler scaler({.enabled = flags.amp == "fp16"});

  const nb::Tensor x = nb::randn({flags.batch, 3, 224, 224}, {.device = device}).contiguous(format);
  const nb::Tensor y = nb::randint(0, 1000, {flags.batch}, {.dtype = nb::kInt64, .device = device});

  nb::Tensor loss;
  auto step = [&] {
    opt.zero_grad();
    {
      nb::amp::Autocast autocast(device, low, autocast_on);
      loss = nb::cross_entropy(model->forward(x), y);
    }
    scaler.scale(loss).backward();
    scaler.step(opt);
    scaler.update();
  };

  for (int i = 0; i < flags.warmup; ++i) step();
  nb::cuda::synchronize();
  nb::cuda::reset_peak_memory_stats();
  nb::cuda::Stream stream = nb::cuda::current_stream();
  nb::cuda::Event start(true), stop(true);
  start.record(stream);
  for (int i = 0; i < flags.steps; ++i) step();
  stop.record(stream);
  stop.synchronize();
  const double ms = start.elapsed_ms(stop) / flags.steps;
  const double img_s = static_cast<double>(flags.batch) * 1000.0 / ms;
  const double peak_alloc = gib(nb::cuda::max_memory_allocated());
  const double peak_reserved = gib(nb::cuda::max_memory_reserved());
  const double final_loss = loss.item<double>();

  std::printf(
      "resnet50 train: batch %lld, amp %s, %s: %.2f ms/step, %.1f img/s, peak %.2f GiB allocated, "
      "%.2f GiB reserved, loss %.4f, scale %.0f\n",
      static_cast<long long>(flags.batch), flags.amp.c_str(), flags.channels_last ? "channels_last" : "NCHW",
      ms, img_s, peak_alloc, peak_reserved, final_loss, scaler.get_scale());
  std::printf(
      "{\"bench\": \"resnet50_train\", \"batch\": %lld, \"amp\": \"%s\", \"channels_last\": %s, "
      "\"steps\": %d, \"warmup\": %d, \"ms_per_iter\": %.3f, \"img_s\": %.1f, \"peak_alloc_GiB\": %.3f, "
      "\"peak_reserved_GiB\": %.3f, \"loss\": %.5f}\n",
      static_cast<long long>(flags.batch), flags.amp.c_str(), flags.channels_last ? "true" : "false",
      flags.steps, flags.warmup, ms, img_s, peak_alloc, peak_reserved, final_loss);
  return 0;
}
