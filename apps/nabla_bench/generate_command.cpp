// `nabla-bench generate`: text generation with nn::models::Llama and its key/value cache, batch
// 1 by default, bfloat16 weights: a prompt (one batched pass), then one token per step, greedy.
// Each generation runs twice, with the default loop (every op launched from the host, attention
// over the filled part of the cache) and with .cuda_graph (each token one replay of a captured
// fixed-shape step), and the tokens of the two are compared. The shapes are `nabla-bench llama`'s
// (768 wide, 12 layers, 12 query / 4 key-value heads, hidden 2048, vocab 32000).
//
//   nabla-bench generate                        # 512-token prompt, 256 new tokens
//   nabla-bench generate --compare-pytorch      # then bench/pytorch/torch_llama_generate.py
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <memory>

#include "nabla/core/cuda/runtime.h"
#include "nabla/nabla.h"
#include "nabla_bench/bench_common.h"
#include "nabla_bench/commands.h"
#include "nabla_bench/table.h"
#include "nabla_bench/torch_compare.h"

namespace nabla::bench {
namespace {

struct GenerateBenchOptions {
  nn::models::LlamaConfig config{.vocab = 32000,
                                 .context = 1024,
                                 .layers = 12,
                                 .heads = 12,
                                 .kv_heads = 4,
                                 .width = 768,
                                 .hidden = 2048,
                                 .rope_base = 10000.0,
                                 .rope_scaling = {},
                                 .eps = 1e-5,
                                 .tie_embeddings = false};
  int64_t batch = 1;
  int64_t prompt = 512;
  int64_t new_tokens = 256;
  int repeats = 3;
  std::string modes = "eager,graph";
  std::string json_path;
  TorchOptions torch;
};

void synchronize_if_cuda(Device device) {
  if (device.is_cuda()) cuda::synchronize();
}

// Seconds per generate() call, the best of `repeats` after one untimed call, and its tokens.
std::pair<double, Tensor> time_generation(nn::models::Llama& model, const Tensor& prompt,
                                          const nn::models::GenerateOptions& options, int repeats) {
  Tensor tokens = model.generate(prompt, options);  // warm-up: plans, kernels, the allocator's cache
  synchronize_if_cuda(prompt.device());
  double best = 0;
  for (int r = 0; r < repeats; ++r) {
    const auto start = std::chrono::steady_clock::now();
    tokens = model.generate(prompt, options);
    synchronize_if_cuda(prompt.device());
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    best = r == 0 ? s : std::min(best, s);
  }
  return {best, tokens};
}

void run_generate(const GenerateBenchOptions& o) {
  const std::vector<std::string> modes = parse_choices(o.modes, "--modes", {"eager", "graph"});
  const nn::models::LlamaConfig& c = o.config;
  NABLA_CHECK(
      c.width % c.heads == 0 && c.heads % c.kv_heads == 0,
      "generate: --heads must divide --width, and --kv-heads must divide --heads (got width {}, heads {}, "
      "kv-heads {})",
      c.width, c.heads, c.kv_heads);
  NABLA_CHECK(o.prompt + o.new_tokens <= c.context,
              "generate: --prompt {} and --new-tokens {} pass the context of {} (--context)", o.prompt,
              o.new_tokens, c.context);
  const Device device = cuda::is_available() ? Device::cuda(0) : Device::cpu();
  manual_seed(0);
  nn::models::Llama model(c);
  model.to(device);
  if (device.is_cuda()) model.to(kBFloat16);
  Generator gen(1);
  const Tensor prompt = randint(0, c.vocab, {o.batch, o.prompt}, {.dtype = kInt64}, &gen).to(device);

  std::vector<nlohmann::json> rows;
  Tensor first_tokens;
  for (const std::string& mode : modes) {
    nn::models::GenerateStats stats;
    const auto [seconds, tokens] = time_generation(
        model, prompt, {.max_new_tokens = o.new_tokens, .cuda_graph = mode == "graph", .stats = &stats},
        o.repeats);
    nlohmann::json row = {{"bench", "generate"},
                          {"mode", "nabla_" + mode},
                          {"batch", o.batch},
                          {"prompt", o.prompt},
                          {"new_tokens", o.new_tokens},
                          {"device", device.str()},
                          {"ms_per_generate", seconds * 1000},
                          {"tokens_s", static_cast<double>(o.batch * o.new_tokens) / seconds},
                          {"graph_replays", stats.graph_replays}};
    if (mode == "graph" && !stats.eager_reason.empty())
      std::printf("generate: steps ran eagerly: %s\n", stats.eager_reason.c_str());
    if (first_tokens.defined()) {
      // Greedy tokens of the two loops: equal unless a near-tie rounds the other way in bf16.
      row["new_tokens_equal_to_first"] =
          eq(tokens, first_tokens).narrow(1, o.prompt, o.new_tokens).to(kInt64).sum().item<int64_t>();
    } else {
      first_tokens = tokens;
    }
    rows.push_back(row);
    std::printf("%s\n", row.dump().c_str());
  }
  const nn::models::LlamaConfig standard = GenerateBenchOptions{}.config;
  const bool default_model = c.vocab == standard.vocab && c.layers == standard.layers &&
                             c.heads == standard.heads && c.kv_heads == standard.kv_heads &&
                             c.width == standard.width && c.hidden == standard.hidden;
  if (o.torch.enabled && !default_model) {
    std::printf("PyTorch comparison skipped: torch_llama_generate.py builds the default shapes only\n");
  } else if (o.torch.enabled) {
    auto compared = run_torch_script(
        o.torch,
        {"--json", "--batch", std::to_string(o.batch), "--prompt", std::to_string(o.prompt), "--new-tokens",
         std::to_string(o.new_tokens), "--repeats", std::to_string(o.repeats), "--modes", o.modes},
        "torch_llama_generate.py");
    if (!compared.skipped.empty()) std::printf("PyTorch comparison skipped: %s\n", compared.skipped.c_str());
    for (auto& row : compared.rows) rows.push_back(row);
  }
  std::optional<double> ours;  // the default loop's rate, what every row is divided by
  for (const auto& row : rows) {
    if (row.value("mode", "") == "nabla_eager") ours = number_at(row, "tokens_s");
  }
  Table table({"run", "ms/generate", "new tokens/s", "x nabla"});
  for (const auto& row : rows) {
    const std::string mode = row.value("mode", "?");
    const std::string name =
        mode == "nabla_eager" ? "nabla"
        : mode == "nabla_graph"
            ? (device.is_cuda() ? "nabla (CUDA graph per token)" : "nabla (fixed-shape steps, no graph)")
        : mode == "graph" ? "PyTorch (CUDA graph per token)"
                          : "PyTorch " + mode;
    table.add_row({name, format_number(number_at(row, "ms_per_generate"), 1),
                   format_number(number_at(row, "tokens_s"), 1),
                   format_number(ratio(number_at(row, "tokens_s"), ours), 3)});
  }
  std::printf(
      "\nnn::models::Llama (%lld layers, width %lld, %lld/%lld heads, hidden %lld, vocab %lld), generate, "
      "batch "
      "%lld, %lld-token prompt, %lld new tokens, greedy, %s\n%s",
      static_cast<long long>(c.layers), static_cast<long long>(c.width), static_cast<long long>(c.heads),
      static_cast<long long>(c.kv_heads), static_cast<long long>(c.hidden), static_cast<long long>(c.vocab),
      static_cast<long long>(o.batch), static_cast<long long>(o.prompt), static_cast<long long>(o.new_tokens),
      device.is_cuda() ? "bf16" : "float32 on the CPU", table.render().c_str());
  if (!o.json_path.empty()) write_json_rows(o.json_path, rows);
}

}  // namespace

void add_generate_command(CLI::App& app) {
  auto options = std::make_shared<GenerateBenchOptions>();
  auto* cmd = app.add_subcommand(
      "generate",
      "text generation with nn::models::Llama's key/value cache: with and without a CUDA graph per token");
  cmd->add_option("--batch", options->batch, "sequences generated together")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--prompt", options->prompt, "prompt tokens (one batched pass)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--new-tokens", options->new_tokens, "tokens generated after the prompt")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--repeats", options->repeats, "timed generations per mode (the best is reported)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--modes", options->modes,
                  "eager: the default loop; graph: GenerateOptions::cuda_graph (each token a graph replay)")
      ->capture_default_str();
  cmd->add_option("--layers", options->config.layers, "transformer blocks")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--width", options->config.width, "model width")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--heads", options->config.heads, "query heads")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--kv-heads", options->config.kv_heads, "key/value heads (grouped-query attention)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--hidden", options->config.hidden, "SwiGLU hidden width")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--vocab", options->config.vocab, "vocabulary size")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--context", options->config.context, "the model's context (at least prompt + new tokens)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--json", options->json_path, "also write the rows to this file as a JSON list");
  add_torch_flags(cmd, options->torch);
  cmd->callback([options] { run_generate(*options); });
}

}  // namespace nabla::bench
