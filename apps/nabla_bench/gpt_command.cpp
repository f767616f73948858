// `nabla-bench gpt`: GPT-2 training throughput and peak memory, the workload of
// bench/pytorch/torch_gpt2.py (a copy of ../shared/bench/torch_gpt2.py, whose figures are in
// TARGETS.md): GPT-2 124M (nn::models::GPT2: 12 layers, 12 heads, width 768, vocab 50304,
// tied embeddings) on one random batch of tokens reused every step, bf16 autocast, AdamW lr 6e-4
// betas (0.9, 0.95) weight decay 0.1 on matrices only, gradient-norm clipping at 1.0; warm-up
// steps, then the timed steps between two CUDA events.
//
//   nabla-bench gpt                                  # batch 16 x 1024
//   nabla-bench gpt --compare-pytorch                # then PyTorch eager and torch.compile
//   nabla-bench gpt --profile 3                      # then 3 steps under nabla::profiler
//   nabla-bench gpt --plain --cuda-graph             # GPT-2 written plainly (plain_gpt.h), fused
//
// --compare-pytorch runs torch_gpt2.py --json after nabla's row (never beside it: they would
// share the GPU) and prints nabla's tokens/s and peak memory over each PyTorch mode's.
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>

#include "nabla/core/cuda/memory.h"
#include "nabla/core/cuda/runtime.h"
#include "nabla/core/cuda/stream.h"
#include "nabla/nabla.h"
#include "nabla_bench/bench_common.h"
#include "nabla_bench/commands.h"
#include "nabla_bench/plain_gpt.h"
#include "nabla_bench/table.h"
#include "nabla_bench/torch_compare.h"

namespace nabla::bench {
namespace {

struct GptBenchOptions {
  nn::models::GPT2Config model;
  int64_t batch = 16;
  int64_t seq = 1024;
  int steps = 30;
  int warmup = 10;
  std::string amp = "bf16";  // off, fp16, bf16
  std::string modes = "eager,compile";
  int profile = 0;
  bool cuda_graph = false;  // capture the step once and replay it; the step compiler fuses it
  bool plain = false;       // the user guide's GPT-2 with plain layers (plain_gpt.h)
  std::string json_path;
  TorchOptions torch;
};

nlohmann::json run_nabla(const GptBenchOptions& o) {
  const Device device = cuda::is_available() ? Device::cuda(0) : Device::cpu();
  manual_seed(0);
  nn::models::GPT2Config config = o.model;
  config.context = std::max(config.context, o.seq);
  std::shared_ptr<nn::Module> holder;
  std::function<Tensor(const Tensor&, const Tensor&)> loss_of;
  if (o.plain) {
    auto plain = plain_gpt(config);
    loss_of = [plain](const Tensor& x, const Tensor& y) { return plain->loss(x, y); };
    holder = plain;
  } else {
    auto zoo = std::make_shared<nn::models::GPT2>(config);
    loss_of = [zoo](const Tensor& x, const Tensor& y) { return zoo->loss(x, y); };
    holder = zoo;
  }
  nn::Module& model = *holder;
  model.to(device);
  TensorList decay, rest;
  for (const auto& p : model.parameters()) (p.dim() >= 2 ? decay : rest).push_back(p);
  optim::AdamW opt({{.params = decay, .weight_decay = 0.1}, {.params = rest, .weight_decay = 0.0}},
                   {.lr = 6e-4, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8});
  Generator gen(1);
  const Tensor window = randint(0, config.vocab, {o.batch, o.seq + 1}, {.dtype = kInt64}, &gen).to(device);
  const Tensor x = window.narrow(1, 0, o.seq), y = window.narrow(1, 1, o.seq);
  const bool amp = o.amp != "off" && device.is_cuda();
  auto step = [&] {
    Tensor loss;
    {
      amp::Autocast autocast(device, autocast_dtype_of(o.amp), amp);
      loss = loss_of(x, y);
    }
    loss.backward();
    optim::clip_grad_norm_(model.parameters(), 1.0);
    opt.step();
    opt.zero_grad();
    return loss.detach();
  };
  // --cuda-graph: one graph per step, through nn::make_graphed_step, whose step compiler fuses
  // the pointwise ops (NABLA_FUSION=0 turns it off). The batch is one tensor reused every step.
  const int capture_call = 3;  // the GraphedStep's warm-up calls come first
  nn::GraphedStep graphed([&](const TensorList&) { return step(); },
                          {.warmup = capture_call,
                           .enabled = o.cuda_graph && device.is_cuda(),
                           .adopt_inputs = true,
                           .fuse = true});
  const auto run_step = [&] { return o.cuda_graph ? graphed(window) : step(); };
  // A graphed run's peak is the capture's (warm_up in bench_common.h).
  const WarmUp warm = warm_up(std::max(o.warmup, o.cuda_graph ? 5 : 0), o.cuda_graph ? capture_call : -1,
                              device.is_cuda(), run_step);
  cuda::Event start(true), end(true);
  const auto wall = std::chrono::steady_clock::now();
  if (device.is_cuda()) start.record(cuda::current_stream());
  Tensor loss;
  for (int i = 0; i < o.steps; ++i) loss = run_step();
  double ms = 0;
  if (device.is_cuda()) {
    end.record(cuda::current_stream());
    end.synchronize();
    ms = start.elapsed_ms(end) / o.steps;
  } else {
    ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - wall).count() / o.steps;
  }
  int64_t params = 0;
  for (const auto& p : model.parameters()) params += p.numel();
  nlohmann::json row = {{"bench", "gpt"},
                        {"mode", "nabla"},
                        {"batch", o.batch},
                        {"seq", o.seq},
                        {"params_M", static_cast<double>(params) / 1e6},
                        {"amp", amp ? o.amp : "off"},
                        {"device", device.str()},
                        {"ms_per_step", ms},
                        {"tokens_s", static_cast<double>(o.batch * o.seq) * 1000.0 / ms},
                        {"peak_alloc_GiB", device.is_cuda() ? gib(cuda::max_memory_allocated()) : 0.0},
                        {"peak_alloc_warmup_GiB", gib(warm.eager_peak)},
                        {"warmup_s", warm.seconds},
                        {"cuda_graph", o.cuda_graph && graphed.graphed()},
                        {"plain", o.plain},
                        {"loss", loss.item<double>()}};
  if (o.cuda_graph) print_fusion_report(graphed);
  if (o.profile > 0) {
    profiler::start();
    for (int i = 0; i < o.profile; ++i) step();
    std::printf("nabla::profiler over %d steps:\n%s", o.profile, profiler::table(profiler::stop()).c_str());
  }
  return row;
}

void print_gpt_table(const GptBenchOptions& o, const std::vector<nlohmann::json>& rows) {
  const nlohmann::json& ours = rows.front();
  Table table({"run", "ms/step", "tokens/s", "peak alloc GiB", "nabla speed x", "nabla memory x"});
  for (const auto& row : rows) {
    const std::string mode = row.value("mode", "?");
    table.add_row(
        {mode == "nabla"     ? "nabla"
         : mode == "compile" ? "torch.compile"
                             : "PyTorch " + mode,
         format_number(number_at(row, "ms_per_step"), 2), format_number(number_at(row, "tokens_s"), 0),
         format_number(number_at(row, "peak_alloc_GiB"), 2),
         format_number(ratio(number_at(ours, "tokens_s"), number_at(row, "tokens_s")), 3),
         format_number(ratio(number_at(ours, "peak_alloc_GiB"), number_at(row, "peak_alloc_GiB")), 3)});
  }
  std::printf(
      "\nGPT-2%s (%lld layers, width %lld, vocab %lld) train, batch %lld x %lld, amp %s, %d warm-up + %d "
      "timed steps; x = nabla / that run\n%s",
      o.plain ? " written plainly" : "", static_cast<long long>(o.model.layers),
      static_cast<long long>(o.model.width), static_cast<long long>(o.model.vocab),
      static_cast<long long>(o.batch), static_cast<long long>(o.seq), ours.value("amp", "?").c_str(),
      o.warmup, o.steps, table.render().c_str());
}

void run_gpt(const GptBenchOptions& o) {
  parse_choices(o.amp, "--amp", amp_choices());
  parse_choices(o.modes, "--modes", {"eager", "compile"});
  std::vector<nlohmann::json> rows = {run_nabla(o)};
  std::printf("%s\n", rows.back().dump().c_str());
  if (o.torch.enabled) {
    const bool default_model = o.model.layers == 12 && o.model.heads == 12 && o.model.width == 768 &&
                               o.model.vocab == 50304 && o.amp == "bf16";
    if (!default_model) {
      std::printf("PyTorch comparison skipped: torch_gpt2.py measures GPT-2 124M in bf16 only\n");
    } else {
      TorchOptions torch = o.torch;
      auto compared = run_torch_script(
          torch,
          {"--json", "--batch", std::to_string(o.batch), "--seq", std::to_string(o.seq), "--steps",
           std::to_string(o.steps), "--warmup", std::to_string(o.warmup), "--modes", o.modes},
          "torch_gpt2.py");
      if (!compared.skipped.empty())
        std::printf("PyTorch comparison skipped: %s\n", compared.skipped.c_str());
      for (auto& row : compared.rows) rows.push_back(std::move(row));
    }
  }
  print_gpt_table(o, rows);
  write_json_rows(o.json_path, rows);
}

}  // namespace

void add_gpt_command(CLI::App& app) {
  auto options = std::make_shared<GptBenchOptions>();
  auto* cmd = app.add_subcommand("gpt", "GPT-2 training throughput and peak memory (tokens/s)");
  cmd->add_option("--batch", options->batch, "sequences per step")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--seq", options->seq, "tokens per sequence")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--steps", options->steps, "timed steps")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--warmup", options->warmup, "untimed steps first")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--amp", options->amp, "autocast dtype: off, fp16 or bf16")->capture_default_str();
  cmd->add_option("--layers", options->model.layers, "transformer blocks")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--heads", options->model.heads, "attention heads")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--width", options->model.width, "model width")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--vocab", options->model.vocab, "vocabulary size")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--modes", options->modes, "PyTorch runs for --compare-pytorch: eager, compile")
      ->capture_default_str();
  cmd->add_option("--profile", options->profile, "after timing, this many steps under nabla::profiler")
      ->check(CLI::NonNegativeNumber);
  cmd->add_flag("--cuda-graph", options->cuda_graph,
                "capture the step into a CUDA graph (nn::make_graphed_step) and replay it; the step compiler "
                "fuses its pointwise ops unless NABLA_FUSION=0");
  cmd->add_flag(
      "--plain", options->plain,
      "GPT-2 as the user guide writes it, with plain layers (LayerNorm, Linear, gelu, attention) and "
      "none of nn::models::GPT2's hand-fused calls");
  cmd->add_option("--json", options->json_path, "also write the rows to this file as a JSON list");
  add_torch_flags(cmd, options->torch);
  cmd->callback([options] { run_gpt(*options); });
}

}  // namespace nabla::bench
