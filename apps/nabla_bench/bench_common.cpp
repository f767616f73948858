#include "nabla_bench/bench_common.h"

#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <fstream>

#include "nabla/core/cuda/memory.h"
#include "nabla/nabla.h"

namespace nabla::bench {

std::shared_ptr<nn::Module> make_model(const std::string& arch, int checkpoint_segments) {
  try {
    if (arch == "vit_b_16") {
      NABLA_CHECK(checkpoint_segments == 0, "--grad-checkpoint is for ResNets, not {}", arch);
      return nn::models::vit_b_16({.num_classes = 1000});
    }
    if (arch == "efficientnet_b0") {
      NABLA_CHECK(checkpoint_segments == 0, "--grad-checkpoint is for ResNets, not {}", arch);
      return nn::models::efficientnet_b0({.num_classes = 1000});
    }
    if (arch.rfind("mobilenet", 0) == 0) {
      NABLA_CHECK(checkpoint_segments == 0, "--grad-checkpoint is for ResNets, not {}", arch);
      if (arch == "mobilenet_v2") return nn::models::mobilenet_v2({.num_classes = 1000});
      if (arch == "mobilenet_v3_large") return nn::models::mobilenet_v3_large({.num_classes = 1000});
      if (arch == "mobilenet_v3_small") return nn::models::mobilenet_v3_small({.num_classes = 1000});
    }
    return nn::models::resnet(arch, {.num_classes = 1000, .checkpoint_segments = checkpoint_segments});
  } catch (const Error& e) {
    throw Error(fmt::format("--arch: {}", e.what()));
  }
}

double gib(size_t bytes) {
  return static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0);
}

WarmUp warm_up(int calls, int capture_call, bool cuda, const std::function<void()>& run_step) {
  WarmUp w;
  if (cuda) cuda::reset_peak_memory_stats();
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < calls; ++i) {
    if (cuda && i == capture_call) {
      w.eager_peak = cuda::max_memory_allocated();
      cuda::reset_peak_memory_stats();
    }
    run_step();
  }
  if (cuda) {
    cuda::synchronize();
    if (capture_call < 0) {
      w.eager_peak = cuda::max_memory_allocated();
      cuda::reset_peak_memory_stats();
    }
  }
  w.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return w;
}

MemoryFormat memory_format_of(const std::string& layout) {
  return layout == "channels-last" ? MemoryFormat::ChannelsLast : MemoryFormat::Contiguous;
}

DType autocast_dtype_of(const std::string& amp) {
  return amp == "bf16" ? kBFloat16 : kFloat16;
}

void apply_memory_fraction(double fraction) {
  if (fraction <= 0) return;
  NABLA_CHECK(fraction <= 1, "--memory-fraction must be in (0, 1], got {}", fraction);
  cuda::set_memory_fraction(fraction);
}

void with_oom_context(const std::string& what, double fraction, const std::function<void()>& body) {
  try {
    body();
  } catch (const Error& e) {
    // The allocator throws OutOfMemoryError; cuDNN and cuBLAS report theirs as failed calls.
    const std::string message = e.what();
    const bool oom = dynamic_cast<const OutOfMemoryError*>(&e) != nullptr ||
                     message.find("out of memory") != std::string::npos ||
                     message.find("ALLOC_FAILED") != std::string::npos;
    if (!oom) throw;
    const std::string cap = fraction > 0 ? fmt::format("under --memory-fraction {}", fraction)
                                         : std::string("with no --memory-fraction cap");
    throw OutOfMemoryError(fmt::format("out of memory in {} {} ({})", what, cap, message));
  }
}

void add_torch_flags(CLI::App* cmd, TorchOptions& options) {
  cmd->add_flag("--compare-pytorch", options.enabled,
                "Afterwards, run the same measurement in PyTorch (a script in bench/pytorch/) and print "
                "nabla / PyTorch");
  cmd->add_option("--python", options.python, "Python interpreter with torch for --compare-pytorch")
      ->capture_default_str();
  cmd->add_option("--torch-script", options.script,
                  "Path of the PyTorch script (default: next to this binary, or bench/pytorch/ here)");
}

void add_memory_fraction_flag(CLI::App* cmd, double& fraction) {
  cmd->add_option("--memory-fraction", fraction,
                  "Cap this process's device memory at this fraction of the GPU (0: no cap)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));
}

void write_json_rows(const std::string& path, const std::vector<nlohmann::json>& rows) {
  if (path.empty()) return;
  std::ofstream out(path);
  NABLA_CHECK(out.good(), "--json: cannot write '{}'", path);
  out << nlohmann::json(rows).dump(2) << "\n";
  std::printf("wrote %s\n", path.c_str());
}

void print_fusion_report(const nn::GraphedStep& step) {
  const FusionStats& w = step.warmup_fusion();
  if (w.recorded_ops == 0) {
    std::printf("step compiler: off (NABLA_FUSION=0, or nothing to fuse)\n");
    return;
  }
  std::printf(
      "step compiler: %d fused kernels for %d ops (%d of them reductions; %d ops unfused, %d never needed, "
      "%d fallbacks; %d saved values computed again in the backward; %d ReLUs and masks folded into "
      "batch norms); compile %.2f s (%d programs compiled, %d from the kernel cache)\n",
      w.fused_kernels, w.fused_ops, w.fused_reductions, w.eager_ops, w.dead_ops, w.fallbacks,
      w.recomputed_values, w.folded_relus, w.compile_s, w.compiled, w.from_disk);
}

}  // namespace nabla::bench
