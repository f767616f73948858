// `nabla-bench llama`: a LLaMA-style model written plainly with the public API, as a user writes
// it (no fused entry point, no model-zoo code): RMSNorm from pointwise ops and a mean, rotary
// embedding from halves and cat, grouped-query attention (enable_gqa, as the PyTorch script), a SwiGLU MLP,
// an untied head; bf16 autocast, AdamW (weight decay on matrices but the embedding), clipping
// at 1.0. The shapes of bench/pytorch/torch_llama.py (a copy of ../shared/bench/torch_llama.py):
// width 768, 12 layers, 12 query / 4 key-value heads, hidden 2048, vocab 32000, 1024 tokens.
// It measures what the step compiler does for code nobody hand-fused.
//
//   nabla-bench llama                          # eager, batch 16 x 1024
//   nabla-bench llama --cuda-graph             # graphed: the step compiler fuses (NABLA_FUSION=0: not)
//   nabla-bench llama --compare-pytorch        # then PyTorch eager and torch.compile
//   nabla-bench llama --model zoo              # nn::models::Llama at the same shapes instead
//   nabla-bench llama --repeat-kv              # k and v repeated to every query head instead of enable_gqa
#include <nlohmann/json.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>

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

struct LlamaShape {
  int64_t vocab = 32000, width = 768, layers = 12, heads = 12, kv_heads = 4, hidden = 2048, seq = 1024;
  bool repeat_kv = false;  // repeat k and v to every query head (the composition before enable_gqa)
  int64_t head_dim() const { return width / heads; }
};

// ---- The model, written as its users write it ---------------------------------------------------

struct RmsNorm : nn::Module {
  Tensor weight;
  double eps;
  RmsNorm(int64_t dim, double eps) : weight(ones({dim})), eps(eps) { register_parameter("weight", weight); }
  Tensor forward(const Tensor& x) override { return x * rsqrt(mean(x * x, {-1}, true) + eps) * weight; }
};

// Rotates the two halves of the last dim by the angles in cos and sin (T, D/2).
Tensor rope(const Tensor& x, const Tensor& cos, const Tensor& sin) {
  const int64_t half = x.size(-1) / 2;
  const Tensor a = x.narrow(-1, 0, half), b = x.narrow(-1, half, half);
  return cat({a * cos - b * sin, b * cos + a * sin}, -1).to(x.dtype());
}

struct Block : nn::Module {
  LlamaShape s;
  RmsNorm attention_norm, ffn_norm;
  nn::Linear wq, wk, wv, wo, w1, w2, w3;
  explicit Block(const LlamaShape& shape)
      : s(shape),
        attention_norm(shape.width, 1e-5),
        ffn_norm(shape.width, 1e-5),
        wq({.in = s.width, .out = s.width, .bias = false}),
        wk({.in = s.width, .out = s.kv_heads * s.head_dim(), .bias = false}),
        wv({.in = s.width, .out = s.kv_heads * s.head_dim(), .bias = false}),
        wo({.in = s.width, .out = s.width, .bias = false}),
        w1({.in = s.width, .out = s.hidden, .bias = false}),
        w2({.in = s.hidden, .out = s.width, .bias = false}),
        w3({.in = s.width, .out = s.hidden, .bias = false}) {
    register_modules({{"attention_norm", attention_norm},
                      {"ffn_norm", ffn_norm},
                      {"wq", wq},
                      {"wk", wk},
                      {"wv", wv},
                      {"wo", wo},
                      {"w1", w1},
                      {"w2", w2},
                      {"w3", w3}});
  }
  Tensor forward(const Tensor& x) override { return x; }  // needs the rotary tables: see run()
  Tensor run(const Tensor& x, const Tensor& cos, const Tensor& sin) {
    const int64_t b = x.size(0), t = x.size(1), d = s.head_dim();
    Tensor h = attention_norm(x);
    Tensor q = rope(wq(h).view({b, t, s.heads, d}).transpose(1, 2), cos, sin);
    Tensor k = rope(wk(h).view({b, t, s.kv_heads, d}).transpose(1, 2), cos, sin);
    Tensor v = wv(h).view({b, t, s.kv_heads, d}).transpose(1, 2);
    if (s.repeat_kv) {
      // Hugging Face's repeat_kv: each kv head copied to its query heads (written, saved, summed back).
      const int64_t group = s.heads / s.kv_heads;
      k = k.unsqueeze(2).expand({b, s.kv_heads, group, t, d}).reshape({b, s.heads, t, d});
      v = v.unsqueeze(2).expand({b, s.kv_heads, group, t, d}).reshape({b, s.heads, t, d});
    }
    // Each of the kv heads serves heads / kv_heads query heads, as torch_llama.py's enable_gqa.
    Tensor y = scaled_dot_product_attention(q, k, v, {.causal = true, .enable_gqa = !s.repeat_kv});
    Tensor out = x + wo(y.transpose(1, 2).reshape({b, t, s.width}));
    h = ffn_norm(out);
    return out + w2(silu(w1(h)) * w3(h));
  }
};

struct Llama : nn::Module {
  LlamaShape s;
  nn::Embedding tok_embeddings;
  nn::ModuleList layers;
  std::vector<Block*> blocks;
  RmsNorm norm;
  nn::Linear output;
  explicit Llama(const LlamaShape& shape)
      : s(shape),
        tok_embeddings(shape.vocab, shape.width),
        norm(shape.width, 1e-5),
        output({.in = shape.width, .out = shape.vocab, .bias = false}) {
    for (int64_t i = 0; i < s.layers; ++i) blocks.push_back(&layers.emplace_back<Block>(s));
    register_modules(
        {{"tok_embeddings", tok_embeddings}, {"layers", layers}, {"norm", norm}, {"output", output}});
  }
  Tensor forward(const Tensor& x) override { return x; }
  Tensor loss(const Tensor& idx, const Tensor& target) {
    const int64_t d = s.head_dim();
    const Device device = idx.device();
    // 10000^(-i/d) for the even i, as torch_llama.py's rope_tables.
    const Tensor inv = exp(arange(0, d, 2, {.dtype = kFloat32, .device = device}) * (-std::log(10000.0) / d));
    const Tensor angles =
        arange(0, idx.size(1), 1, {.dtype = kFloat32, .device = device}).unsqueeze(1) * inv.unsqueeze(0);
    const Tensor cos = nabla::cos(angles), sin = nabla::sin(angles);
    Tensor x = tok_embeddings(idx);
    for (Block* block : blocks) x = block->run(x, cos, sin);
    return cross_entropy(output(norm(x)).reshape({-1, s.vocab}), target.reshape({-1}));
  }
};

// ---- The benchmark ------------------------------------------------------------------------------

struct LlamaBenchOptions {
  LlamaShape shape;
  int64_t batch = 16;
  int steps = 20;
  int warmup = 8;
  bool cuda_graph = false;
  int profile = 0;
  std::string modes = "eager,compile";
  std::string model = "plain";  // or "zoo": nn::models::Llama (RotaryCache, enable_gqa)
  std::string json_path;
  TorchOptions torch;
};

nlohmann::json run_nabla(const LlamaBenchOptions& o) {
  const Device device = cuda::is_available() ? Device::cuda(0) : Device::cpu();
  manual_seed(0);
  // The plain model above, or the model zoo's (same shapes; Hugging Face's names).
  std::shared_ptr<nn::Module> module;
  std::function<Tensor(const Tensor&, const Tensor&)> loss_of;
  if (o.model == "zoo") {
    auto zoo = std::make_shared<nn::models::Llama>(nn::models::LlamaConfig{.vocab = o.shape.vocab,
                                                                           .context = o.shape.seq,
                                                                           .layers = o.shape.layers,
                                                                           .heads = o.shape.heads,
                                                                           .kv_heads = o.shape.kv_heads,
                                                                           .width = o.shape.width,
                                                                           .hidden = o.shape.hidden,
                                                                           .rope_base = 10000.0,
                                                                           .rope_scaling = {},
                                                                           .eps = 1e-5,
                                                                           .tie_embeddings = false});
    loss_of = [zoo](const Tensor& x, const Tensor& y) { return zoo->loss(x, y); };
    module = zoo;
  } else {
    auto plain = std::make_shared<Llama>(o.shape);
    loss_of = [plain](const Tensor& x, const Tensor& y) { return plain->loss(x, y); };
    module = plain;
  }
  nn::Module& model = *module;
  model.to(device);
  TensorList decay, rest;
  for (const auto& [name, p] : model.named_parameters())
    (p.dim() >= 2 && name.find("embed") == std::string::npos ? decay : rest).push_back(p);
  optim::AdamW opt({{.params = decay, .weight_decay = 0.1}, {.params = rest, .weight_decay = 0.0}},
                   {.lr = 3e-4, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8});
  Generator gen(1);
  const Tensor data =
      randint(0, o.shape.vocab, {o.batch, o.shape.seq + 1}, {.dtype = kInt64}, &gen).to(device);
  const Tensor x = data.narrow(1, 0, o.shape.seq), y = data.narrow(1, 1, o.shape.seq);
  auto step = [&] {
    Tensor loss;
    {
      amp::Autocast autocast(device, kBFloat16, device.is_cuda());
      loss = loss_of(x, y);
    }
    loss.backward();
    optim::clip_grad_norm_(model.parameters(), 1.0);
    opt.step();
    opt.zero_grad();
    return loss.detach();
  };
  const int capture_call = 3;  // the GraphedStep's warm-up calls come first
  nn::GraphedStep graphed([&](const TensorList&) { return step(); },
                          {.warmup = capture_call,
                           .enabled = o.cuda_graph && device.is_cuda(),
                           .adopt_inputs = true,
                           .fuse = true});
  const auto run_step = [&] { return o.cuda_graph ? graphed(data) : step(); };
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
  if (o.cuda_graph) print_fusion_report(graphed);
  if (o.profile > 0) {
    // Eager and unfused: the profiler's per-op events would split every fused chain anyway.
    profiler::start();
    for (int i = 0; i < o.profile; ++i) step();
    std::printf("nabla::profiler over %d steps:\n%s", o.profile, profiler::table(profiler::stop()).c_str());
  }
  return {{"bench", "llama"},
          {"mode", "nabla"},
          {"model", o.model},
          {"batch", o.batch},
          {"params_M", static_cast<double>(params) / 1e6},
          {"device", device.str()},
          {"cuda_graph", o.cuda_graph && graphed.graphed()},
          {"ms_per_step", ms},
          {"tokens_s", static_cast<double>(o.batch * o.shape.seq) * 1000.0 / ms},
          {"peak_alloc_GiB", device.is_cuda() ? gib(cuda::max_memory_allocated()) : 0.0},
          {"peak_alloc_warmup_GiB", gib(warm.eager_peak)},
          {"warmup_s", warm.seconds},
          {"loss", loss.item<double>()}};
}

void run_llama(const LlamaBenchOptions& o) {
  parse_choices(o.modes, "--modes", {"eager", "compile"});
  NABLA_CHECK(o.model == "plain" || o.model == "zoo", "llama: --model must be plain or zoo, got '{}'",
              o.model);
  NABLA_CHECK(
      !(o.shape.repeat_kv && o.model == "zoo"),
      "llama: --repeat-kv changes the plain model; nn::models::Llama (--model zoo) always uses enable_gqa");
  NABLA_CHECK(o.shape.width % o.shape.heads == 0 && o.shape.heads % o.shape.kv_heads == 0,
              "llama: --width must divide into --heads, and --heads into --kv-heads (got {}, {}, {})",
              o.shape.width, o.shape.heads, o.shape.kv_heads);
  std::vector<nlohmann::json> rows = {run_nabla(o)};
  std::printf("%s\n", rows.back().dump().c_str());
  if (o.torch.enabled) {
    const LlamaShape standard;
    const bool default_model = o.shape.width == standard.width && o.shape.layers == standard.layers &&
                               o.shape.heads == standard.heads && o.shape.kv_heads == standard.kv_heads &&
                               o.shape.hidden == standard.hidden && o.shape.vocab == standard.vocab &&
                               o.shape.seq == standard.seq;
    if (!default_model) {
      std::printf("PyTorch comparison skipped: torch_llama.py measures the default shapes only\n");
    } else {
      auto compared =
          run_torch_script(o.torch,
                           {"--json", "--batch", std::to_string(o.batch), "--steps", std::to_string(o.steps),
                            "--warmup", std::to_string(o.warmup), "--modes", o.modes},
                           "torch_llama.py");
      if (!compared.skipped.empty())
        std::printf("PyTorch comparison skipped: %s\n", compared.skipped.c_str());
      for (auto& row : compared.rows) rows.push_back(row);
    }
  }
  const nlohmann::json& ours = rows.front();
  Table table({"run", "ms/step", "tokens/s", "peak alloc GiB", "nabla speed x", "nabla memory x"});
  for (const auto& row : rows) {
    const std::string mode = row.value("mode", "?");
    table.add_row(
        {mode == "nabla"     ? (ours.value("cuda_graph", false) ? "nabla (graphed)" : "nabla")
         : mode == "compile" ? "torch.compile"
                             : "PyTorch " + mode,
         format_number(number_at(row, "ms_per_step"), 2), format_number(number_at(row, "tokens_s"), 0),
         format_number(number_at(row, "peak_alloc_GiB"), 2),
         format_number(ratio(number_at(ours, "tokens_s"), number_at(row, "tokens_s")), 3),
         format_number(ratio(number_at(ours, "peak_alloc_GiB"), number_at(row, "peak_alloc_GiB")), 3)});
  }
  std::printf(
      "\nLLaMA-style (%lld layers, width %lld, %lld/%lld heads, hidden %lld, vocab %lld) %s, train, "
      "batch %lld x %lld, bf16; x = nabla / that run\n%s",
      static_cast<long long>(o.shape.layers), static_cast<long long>(o.shape.width),
      static_cast<long long>(o.shape.heads), static_cast<long long>(o.shape.kv_heads),
      static_cast<long long>(o.shape.hidden), static_cast<long long>(o.shape.vocab),
      o.model == "zoo"    ? "nn::models::Llama"
      : o.shape.repeat_kv ? "written plainly, k/v repeated"
                          : "written plainly",
      static_cast<long long>(o.batch), static_cast<long long>(o.shape.seq), table.render().c_str());
  if (!o.json_path.empty()) write_json_rows(o.json_path, rows);
}

}  // namespace

void add_llama_command(CLI::App& app) {
  auto options = std::make_shared<LlamaBenchOptions>();
  auto* cmd =
      app.add_subcommand("llama", "a LLaMA-style model written plainly: training throughput and peak memory");
  cmd->add_option("--model", options->model,
                  "plain: the model written plainly in this file; zoo: nn::models::Llama (RotaryCache's "
                  "kernel, grouped-query attention)")
      ->capture_default_str();
  cmd->add_option("--batch", options->batch, "sequences per step")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--seq", options->shape.seq, "tokens per sequence")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--steps", options->steps, "timed steps")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--warmup", options->warmup, "untimed steps first")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--profile", options->profile, "after timing, this many steps under nabla::profiler")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--layers", options->shape.layers, "transformer blocks")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--width", options->shape.width, "model width")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--heads", options->shape.heads, "query heads")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--kv-heads", options->shape.kv_heads, "key/value heads (grouped-query attention)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--hidden", options->shape.hidden, "SwiGLU hidden width")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--vocab", options->shape.vocab, "vocabulary size")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_flag("--repeat-kv", options->shape.repeat_kv,
                "the plain model repeats k and v to every query head (unsqueeze, expand, reshape) instead of "
                "attention's enable_gqa: the composition grouped-query attention replaces");
  cmd->add_flag(
      "--cuda-graph", options->cuda_graph,
      "capture the step into a CUDA graph (nn::make_graphed_step) and replay it; the step compiler fuses "
      "its pointwise ops unless NABLA_FUSION=0");
  cmd->add_option("--modes", options->modes, "PyTorch runs for --compare-pytorch: eager, compile")
      ->capture_default_str();
  cmd->add_option("--json", options->json_path, "also write the rows to this file as a JSON list");
  add_torch_flags(cmd, options->torch);
  cmd->callback([options] { run_llama(*options); });
}

}  // namespace nabla::bench
