// `nabla-bench infer`: ResNet eval latency, the inference half of ../shared/bench/torch_resnet50.py
// (and of bench/pytorch/nabla_bench_torch.py infer, which --compare-pytorch runs):
//
//   nabla-bench infer --batch-sizes 16,32,64,256 --amp off,fp16 --channels-last --compare-pytorch
//   nabla-bench infer --batch-sizes 16,32,64 --amp fp16 --channels-last --fuse --cuda-graph --compare-pytorch
//
// --cuda-graph captures one forward after the warm-up and times its replays; --compare-pytorch
// then also runs the script under torch.compile(mode="reduce-overhead"), PyTorch's CUDA graphs.
//
// One row per (amp, layout, batch): a random batch, the model in eval mode under NoGradGuard,
// `--warmup` untimed forwards (cuDNN autotuning), then `--iters` forwards (or as many as fit in
// `--seconds`), each timed on its own. The median and p90 are reported, and img/s from the median.
//
// fp16 and bf16 are autocast, as PyTorch's `torch.autocast` does it: the model stays float32
// (nabla's batch norm keeps float32 parameters for 16-bit inputs), convolutions and the linear
// layer run in the lower dtype. One autocast scope per forward, so each forward pays its own
// weight casts, as a request would; the PyTorch script does the same. `half` is the other common
// setup, ../shared/bench/torch_infer_latency.py's: the model converted to float16 (after any
// folding) and a float16 batch, no autocast, on both sides.
//
// Each forward is bracketed by CUDA events and waited for before the next one starts: this is a
// latency benchmark, so the per-iteration host sync is the measurement, not overhead. The wall
// time of the whole timed loop also gives "img/s (wall)", which `concurrent` sums over jobs.
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <memory>
#include <numeric>

#include "nabla/core/cuda/graph.h"
#include "nabla/core/cuda/memory.h"
#include "nabla/core/cuda/runtime.h"
#include "nabla/core/cuda/stream.h"
#include "nabla/nabla.h"
#include "nabla_bench/bench_common.h"
#include "nabla_bench/commands.h"
#include "nabla_bench/table.h"
#include "nabla_bench/torch_compare.h"

namespace nabla::bench {
namespace {

struct InferBenchOptions {
  std::string arch = "resnet50";
  std::string batch_sizes = "16,32,64,256";
  std::string amp = "off,fp16";
  std::string layout;
  bool channels_last = false;
  int warmup = 10;
  int iters = 50;
  double seconds = 0;  // > 0: run timed forwards for this long instead of --iters
  double memory_fraction = 0;
  bool cuda_graph = false;  // capture one forward after the warm-up and time its replays
  bool fuse = false;        // fold the batch norms into the convolutions (ResNet::fuse_for_inference)
  TorchOptions torch;
  bool torch_compile = true;  // with --compare-pytorch, also torch.compile(mode="reduce-overhead")
  std::string json_path;
};

nlohmann::json infer_one(const InferBenchOptions& o, nn::Module& model, int64_t batch, const std::string& amp,
                         const std::string& layout) {
  const Device device = Device::cuda(cuda::current_device());
  Tensor x = randn({batch, 3, 224, 224}, {.device = device})
                 .to(amp == "half" ? kFloat16 : kFloat32)
                 .contiguous(memory_format_of(layout));  // (N, 3, 224, 224)
  NoGradGuard no_grad;
  auto forward = [&] {
    amp::Autocast autocast(device, autocast_dtype_of(amp), amp == "fp16" || amp == "bf16");
    return model.forward(x);  // (N, 1000)
  };
  for (int i = 0; i < o.warmup; ++i) forward();
  cuda::synchronize();
  cuda::reset_peak_memory_stats();
  // --cuda-graph: one forward captured (after the warm-up settled cuDNN's choices), then each
  // timed iteration is one replay: no host work per layer.
  cuda::Graph graph;
  if (o.cuda_graph) {
    graph.capture_begin();
    Tensor captured = forward();
    graph.capture_end();
    (void)captured;  // its memory stays in the graph's pool, rewritten by every replay
  }

  const cuda::Stream stream = cuda::current_stream();
  cuda::Event begin(/*enable_timing=*/true), end(/*enable_timing=*/true);
  std::vector<double> times_ms;
  const auto start = std::chrono::steady_clock::now();
  auto elapsed = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  while (times_ms.empty() ||
         (o.seconds > 0 ? elapsed() < o.seconds : static_cast<int>(times_ms.size()) < o.iters)) {
    begin.record(stream);
    if (o.cuda_graph) {
      graph.replay(stream);
    } else {
      Tensor y = forward();
    }
    end.record(stream);
    end.synchronize();  // latency: this forward is done before the next starts (see the top note)
    times_ms.push_back(begin.elapsed_ms(end));
  }
  const double wall = elapsed();
  const double median = percentile(times_ms, 50);
  const auto n = static_cast<double>(times_ms.size());
  return {{"bench", "infer"},
          {"framework", "nabla"},
          {"arch", o.arch},
          {"batch", batch},
          {"amp", amp},
          {"layout", layout},
          {"channels_last", layout == "channels-last"},
          {"warmup", o.warmup},
          {"iters", times_ms.size()},
          {"median_ms", median},
          {"p90_ms", percentile(times_ms, 90)},
          {"mean_ms", std::accumulate(times_ms.begin(), times_ms.end(), 0.0) / n},
          {"img_s", static_cast<double>(batch) * 1000.0 / median},
          {"img_s_wall", static_cast<double>(batch) * n / wall},
          {"peak_alloc_GiB", gib(cuda::max_memory_allocated())},
          {"peak_reserved_GiB", gib(cuda::max_memory_reserved())},
          {"memory_fraction", o.memory_fraction},
          {"cuda_graph", o.cuda_graph},
          {"fused", o.fuse}};
}

std::vector<std::string> torch_args(const InferBenchOptions& o, const std::vector<std::string>& layouts) {
  std::vector<std::string> args = {"infer",
                                   "--arch",
                                   o.arch,
                                   "--batch-sizes",
                                   o.batch_sizes,
                                   "--amp",
                                   o.amp,
                                   "--warmup",
                                   std::to_string(o.warmup),
                                   "--iters",
                                   std::to_string(o.iters),
                                   "--layout",
                                   fmt::format("{}", fmt::join(layouts, ","))};
  if (o.memory_fraction > 0) {
    args.push_back("--memory-fraction");
    args.push_back(fmt::format("{}", o.memory_fraction));
  }
  return args;
}

void print_infer_table(const InferBenchOptions& o, const std::vector<nlohmann::json>& rows, bool with_torch,
                       bool with_compile) {
  std::vector<std::string> headers = {"amp",    "layout", "batch",          "median ms",
                                      "p90 ms", "img/s",  "peak alloc GiB", "peak reserved GiB"};
  if (with_torch) {
    for (const char* h :
         {"torch median ms", "torch img/s", "img/s ratio", "torch reserved GiB", "reserved ratio"})
      headers.emplace_back(h);
  }
  if (with_compile) {
    for (const char* h : {"graphs median ms", "img/s ratio vs graphs"}) headers.emplace_back(h);
  }
  Table table(headers);
  for (const auto& row : rows) {
    std::vector<std::string> cells = {row["amp"].get<std::string>(),
                                      row["layout"].get<std::string>(),
                                      std::to_string(row["batch"].get<int64_t>()),
                                      format_number(number_at(row, "median_ms"), 3),
                                      format_number(number_at(row, "p90_ms"), 3),
                                      format_number(number_at(row, "img_s"), 1),
                                      format_number(number_at(row, "peak_alloc_GiB"), 2),
                                      format_number(number_at(row, "peak_reserved_GiB"), 2)};
    if (with_torch) {
      cells.push_back(format_number(number_at(row, "torch_median_ms"), 3));
      cells.push_back(format_number(number_at(row, "torch_img_s"), 1));
      cells.push_back(format_number(number_at(row, "ratio_img_s"), 3));
      cells.push_back(format_number(number_at(row, "torch_peak_reserved_GiB"), 2));
      cells.push_back(format_number(number_at(row, "ratio_peak_reserved_GiB"), 3));
    }
    if (with_compile) {
      cells.push_back(format_number(number_at(row, "compile_median_ms"), 3));
      cells.push_back(format_number(number_at(row, "compile_ratio_img_s"), 3));
    }
    table.add_row(std::move(cells));
  }
  std::printf("\n%s inference (eval, no grad), %d warm-up forwards, %s%s%s%s\n%s", o.arch.c_str(), o.warmup,
              o.seconds > 0 ? fmt::format("{} s of timed forwards", o.seconds).c_str()
                            : fmt::format("{} timed forwards", o.iters).c_str(),
              fmt::format("{}{}", o.fuse ? ", batch norms folded" : "",
                          o.cuda_graph ? ", nabla replays a CUDA graph" : "")
                  .c_str(),
              with_torch ? "; ratio = nabla / PyTorch" : "",
              with_compile ? " (eager; \"graphs\" = torch.compile(mode=\"reduce-overhead\"))" : "",
              table.render().c_str());
}

void run_infer(const InferBenchOptions& o) {
  const auto batches = parse_positive_ints(o.batch_sizes, "--batch-sizes");
  std::vector<std::string> allowed = amp_choices();
  allowed.emplace_back("half");  // the model and the batch in float16, no autocast (model.half())
  const auto amps = parse_choices(o.amp, "--amp", allowed);
  const auto layouts = resolve_layouts(o.layout, o.channels_last);
  NABLA_CHECK(cuda::is_available(), "nabla-bench infer needs a CUDA device, and none was found");
  apply_memory_fraction(o.memory_fraction);
  const RoutesGuard routes({.cudnn_benchmark = true});

  std::vector<nlohmann::json> rows;
  for (const auto& amp : amps) {
    for (const auto& layout : layouts) {
      // A fresh model per (amp, layout), freed (and the cache emptied) before the next.
      std::shared_ptr<nn::Module> model;
      with_oom_context(fmt::format("{} infer (building the model)", o.arch), o.memory_fraction, [&] {
        manual_seed(0);
        model = make_model(o.arch);
        model->to(Device::cuda(cuda::current_device()), memory_format_of(layout));
        model->eval();
        if (o.fuse) {
          auto* resnet = dynamic_cast<nn::models::ResNet*>(model.get());
          NABLA_CHECK(resnet != nullptr, "--fuse folds a ResNet's batch norms; --arch {} is not a ResNet",
                      o.arch);
          resnet->fuse_for_inference();
        }
        if (amp == "half") {
          // After folding (which computes in float64). Batch norms that were not folded keep
          // their float32 tensors, the dtype nabla's batch norm takes for 16-bit inputs
          // (PyTorch's .half() converts them too; cuDNN computes in float32 either way).
          std::vector<std::pair<nn::Module*, nn::StateDict>> norms;
          model->apply([&](nn::Module& m) {
            if (dynamic_cast<nn::BatchNorm2d*>(&m) != nullptr) norms.emplace_back(&m, m.state_dict());
          });
          model->to(kFloat16);
          for (auto& [m, state] : norms) m->to(kFloat32).load_state_dict(state);
        }
      });
      for (int64_t batch : batches) {
        with_oom_context(fmt::format("{} infer batch {} amp {} {}", o.arch, batch, amp, layout),
                         o.memory_fraction,
                         [&] { rows.push_back(infer_one(o, *model, batch, amp, layout)); });
        const auto& r = rows.back();
        std::printf(
            "%s infer: batch %lld, amp %s, %s: median %.3f ms, p90 %.3f ms, %.1f img/s, peak %.2f GiB "
            "allocated / %.2f GiB reserved\n%s\n",
            o.arch.c_str(), static_cast<long long>(batch), amp.c_str(), layout.c_str(),
            r["median_ms"].get<double>(), r["p90_ms"].get<double>(), r["img_s"].get<double>(),
            r["peak_alloc_GiB"].get<double>(), r["peak_reserved_GiB"].get<double>(), r.dump().c_str());
        std::fflush(stdout);
        // The next batch size starts from an empty cache, so its reserved peak is its own.
        cuda::synchronize();
        cuda::empty_cache();
      }
      model.reset();
      cuda::synchronize();
      cuda::empty_cache();
    }
  }

  bool with_torch = false, with_compile = false;
  if (o.torch.enabled) {
    if (o.seconds > 0) {
      std::printf("PyTorch comparison skipped: the PyTorch script counts --iters, not --seconds\n");
    } else {
      auto torch = run_torch_script(o.torch, torch_args(o, layouts));
      if (!torch.skipped.empty()) {
        std::printf("PyTorch comparison skipped: %s\n", torch.skipped.c_str());
      } else {
        attach_torch_rows(rows, torch.rows, {"arch", "batch", "amp", "layout"},
                          {"img_s", "median_ms", "peak_reserved_GiB"});
        with_torch = true;
        if (o.torch_compile) {
          auto args = torch_args(o, layouts);
          args.insert(args.end(), {"--compile-mode", "reduce-overhead"});
          auto compiled = run_torch_script(o.torch, args);
          if (!compiled.skipped.empty()) {
            std::printf("torch.compile comparison skipped: %s\n", compiled.skipped.c_str());
          } else {
            attach_torch_rows(rows, compiled.rows, {"arch", "batch", "amp", "layout"}, {"img_s", "median_ms"},
                              "compile");
            with_compile = true;
          }
        }
      }
    }
  }
  print_infer_table(o, rows, with_torch, with_compile);
  write_json_rows(o.json_path, rows);
}

}  // namespace

void add_infer_command(CLI::App& app) {
  auto o = std::make_shared<InferBenchOptions>();
  auto* cmd = app.add_subcommand("infer",
                                 "ResNet eval latency per batch size: median and p90 ms, img/s "
                                 "(the inference workload of torch_resnet50.py)");
  cmd->add_option("--arch", o->arch,
                  "resnet18|34|50|101|152, or "
                  "mobilenet_v2|mobilenet_v3_large|mobilenet_v3_small|efficientnet_b0|vit_b_16")
      ->capture_default_str();
  cmd->add_option("--batch-sizes", o->batch_sizes, "A comma list of batch sizes: one row each")
      ->capture_default_str();
  cmd->add_option("--amp", o->amp,
                  "A comma list of off, fp16 and bf16 (autocast) and half (the model and the batch in "
                  "float16, no autocast, as torch_infer_latency.py's model.half()): one row each")
      ->capture_default_str();
  cmd->add_option("--layout", o->layout,
                  "A comma list of nchw and channels-last: one row each (default nchw)");
  cmd->add_flag("--channels-last", o->channels_last,
                "Model and batch in NHWC (same as --layout channels-last)");
  cmd->add_option("--warmup", o->warmup, "Untimed forwards first (cuDNN autotuning)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--iters", o->iters, "Timed forwards per row")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--seconds", o->seconds, "Time forwards for this many seconds per row instead of --iters")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  add_memory_fraction_flag(cmd, o->memory_fraction);
  cmd->add_flag("--cuda-graph", o->cuda_graph,
                "Capture one forward into a CUDA graph after the warm-up and time its replays");
  cmd->add_flag("--fuse", o->fuse,
                "Fold each batch norm into its convolution (ResNet::fuse_for_inference): convolution, bias, "
                "ReLU and residual sum as one call (a cuBLASLt epilogue or cuDNN's fusion engines)");
  add_torch_flags(cmd, o->torch);
  cmd->add_flag(
      "!--no-torch-compile", o->torch_compile,
      "With --compare-pytorch, skip the torch.compile(mode=\"reduce-overhead\") run (PyTorch's CUDA graphs)");
  cmd->add_option("--json", o->json_path, "Also write the rows as a JSON list to this file");
  cmd->callback([o] { run_infer(*o); });
}

}  // namespace nabla::bench
