// Trains nabla's GPT-2 (nn/models/gpt2.h, Hugging Face's names) with the public API: AdamW (no
// decay on biases and norms), cosine learning rate after a linear warm-up, bf16 autocast on CUDA,
// gradient clipping at 1.0 and gradient accumulation, on synthetic tokens, a token file or the
// bytes of text files; then samples from it.
//
//   train_gpt --bench [--batch 16] [--seq 1024] [--steps 30] [--warmup 10]   # GPT-2 124M speed
//   train_gpt --bench --profile 3     # then 3 more steps under nabla::profiler, op by op
//   train_gpt --data tokens.bin --layers 4 --heads 4 --width 256 --vocab 256 --steps 200
//   train_gpt --text /usr/share/games/fortunes --small --steps 2000 --sample 400   # byte-level demo
//   train_gpt --tiny --steps 30          # a small model on counting sequences; fails unless the loss falls
//   train_gpt --data t.bin --init w.safetensors --sequential --no-amp --log losses.txt  #
//   bench/pytorch/gpt2_curve.py
//
// --init loads a Hugging Face GPT-2 state dict (safetensors) instead of the random start.
// --sequential takes batch i's rows from consecutive windows of the token file (row r of step i
// starts at ((i * accum + micro) * batch + r) * seq), so another framework can feed the same
// batches; otherwise windows start at random. --accum N sums the gradients of N micro-batches of
// --batch rows before each optimizer step. --log FILE writes each step's loss, one per line.
//
// Token files are nanoGPT's raw uint16 or llm.c's (a 256 x int32 header, then uint16 or uint32
// tokens), told apart by the header (nabla::data::read_token_file).
// --bench prints one line of tokens/s, ms/step and peak memory, the figures
// ../shared/bench/torch_gpt2.py prints for PyTorch.
#include <nabla/nabla.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <iomanip>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/byte_text.h"
#include "common/flags.h"

namespace nb = nabla;

namespace {

struct Args {
  nb::nn::models::GPT2Config model;
  int64_t batch = 16, seq = 1024, steps = 30, warmup = 10, profile = 0, accum = 1;
  double lr = 6e-4;
  bool bench = false, amp = true, sequential = false;
  std::string data, text, init, log, prompt = "\n";
  int64_t sample = 0, top_k = 40;
  double temperature = 0.8;
};

Args parse(int argc, char** argv) {
  Args a;
  examples::Flags f(argc, argv, "train_gpt.cpp");
  const std::map<std::string, std::function<void()>> flags = {
      {"--bench", [&] { a.bench = true; }},
      {"--profile", [&] { a.profile = f.whole(); }},
      {"--no-amp", [&] { a.amp = false; }},
      {"--sequential", [&] { a.sequential = true; }},
      {"--accum", [&] { a.accum = f.whole(); }},
      {"--init", [&] { a.init = f.text(); }},
      {"--log", [&] { a.log = f.text(); }},
      {"--tiny",
       [&] {
         a.model = {.vocab = 256, .context = 64, .layers = 2, .heads = 2, .width = 64};
         a.batch = 4, a.seq = 64;
       }},
      {"--small",
       [&] {
         a.model = {.vocab = 256, .context = 256, .layers = 6, .heads = 6, .width = 384};
         a.batch = 64, a.seq = 256, a.lr = 1e-3;
       }},
      {"--batch", [&] { a.batch = f.whole(); }},
      {"--seq", [&] { a.seq = f.whole(); }},
      {"--steps", [&] { a.steps = f.whole(); }},
      {"--warmup", [&] { a.warmup = f.whole(); }},
      {"--layers", [&] { a.model.layers = f.whole(); }},
      {"--context", [&] { a.model.context = f.whole(); }},
      {"--heads", [&] { a.model.heads = f.whole(); }},
      {"--width", [&] { a.model.width = f.whole(); }},
      {"--vocab", [&] { a.model.vocab = f.whole(); }},
      {"--lr", [&] { a.lr = f.real(); }},
      {"--data", [&] { a.data = f.text(); }},
      {"--text", [&] { a.text = f.text(); }},
      {"--prompt", [&] { a.prompt = f.text(); }},
      {"--sample", [&] { a.sample = f.whole(); }},
      {"--top-k", [&] { a.top_k = f.whole(); }},
      {"--temperature", [&] { a.temperature = f.real(); }},
  };
  f.parse(flags);
  if (!a.text.empty()) a.model.vocab = 256;  // bytes
  if (a.batch < 1 || a.seq < 1 || a.steps < 1 || a.accum < 1)
    throw std::invalid_argument("--batch, --seq, --steps and --accum must be at least 1");
  a.model.context = std::max(a.model.context, a.seq);
  return a;
}

// Continues `prompt` (bytes) by `count` tokens: softmax of the last position's logits at
// `temperature`, restricted to the top_k most likely, one multinomial draw per token.
std::string sample_text(nb::nn::models::GPT2& model, const std::string& prompt, int64_t count,
                        double temperature, int64_t top_k, nb::Device device) {
  nb::NoGradGuard no_grad;
  model.eval();
  if (prompt.empty()) throw std::invalid_argument("--prompt must hold at least one byte");
  if (!(temperature > 0)) throw std::invalid_argument("--temperature must be > 0");
  std::vector<int64_t> ids;
  for (unsigned char c : prompt) ids.push_back(c);  // bytes 0..255, whatever char's sign
  std::string out;
  nb::Generator gen(7);
  for (int64_t i = 0; i < count; ++i) {
    const int64_t T = std::min<int64_t>(static_cast<int64_t>(ids.size()), model.config.context);
    const std::vector<int64_t> window(ids.end() - T, ids.end());
    const nb::Tensor x = nb::tensor<int64_t>(window, {1, T}).to(device);
    const nb::Tensor last = model.logits(x).select(1, T - 1).to(nb::kFloat32);  // (1, V)
    const auto [top, where] = nb::topk(last, std::min(top_k, last.size(-1)));
    const nb::Tensor pick = nb::multinomial(nb::softmax(top / temperature, -1), 1, {.generator = &gen});
    const int64_t token = nb::gather(where, 1, pick).item<int64_t>();
    ids.push_back(token);
    out.push_back(static_cast<char>(token));
  }
  model.train();
  return out;
}

}  // namespace

int main(int argc, char** argv) try {
  const Args a = parse(argc, argv);
  nb::manual_seed(0);
  const nb::Device device = nb::cuda::is_available() ? nb::Device::cuda(0) : nb::Device::cpu();
  nb::nn::models::GPT2 model(a.model);
  if (!a.init.empty()) model.load_hf_state_dict(nb::load_safetensors(a.init).tensors);
  model.to(device);
  nb::TensorList decay, rest;
  for (const auto& p : model.parameters()) (p.dim() >= 2 ? decay : rest).push_back(p);
  nb::optim::AdamW opt({{.params = decay, .weight_decay = 0.1}, {.params = rest, .weight_decay = 0.0}},
                       {.lr = a.lr, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8});
  int64_t count = 0;
  for (const auto& p : model.parameters()) count += p.numel();

  std::vector<uint32_t> tokens;
  if (!a.data.empty()) tokens = nb::data::read_token_file(a.data);
  if (!a.text.empty()) tokens = examples::read_text(a.text);
  nb::Generator gen(1);
  int64_t micro_batches = 0;  // drawn so far: --sequential's position in the file
  auto batch = [&]() -> std::pair<nb::Tensor, nb::Tensor> {
    const int64_t k = micro_batches++;
    nb::Tensor window;
    if (tokens.empty() && a.bench) {
      window = nb::randint(0, a.model.vocab, {a.batch, a.seq + 1}, {.dtype = nb::kInt64}, &gen);
    } else if (tokens.empty()) {
      // Something learnable without a file: counting sequences (t + start) mod vocab.
      const nb::Tensor start = nb::randint(0, a.model.vocab, {a.batch, 1}, {.dtype = nb::kInt64}, &gen);
      const nb::Tensor t = nb::arange(static_cast<double>(a.seq + 1), {.dtype = nb::kInt64}).unsqueeze(0);
      const auto v = (start + t).to_vector<int64_t>();
      std::vector<int64_t> ids(v.size());
      for (size_t i = 0; i < v.size(); ++i) ids[i] = v[i] % a.model.vocab;
      window = nb::tensor<int64_t>(ids, {a.batch, a.seq + 1});
    } else {
      const int64_t room = static_cast<int64_t>(tokens.size()) - a.seq - 1;
      if (room < 1) throw std::runtime_error("the token file holds fewer than --seq + 2 tokens");
      std::vector<int64_t> starts;
      if (a.sequential) {
        for (int64_t r = 0; r < a.batch; ++r) starts.push_back(((k * a.batch + r) * a.seq) % room);
      } else {
        starts = nb::randint(0, room, {a.batch}, {.dtype = nb::kInt64}, &gen).to_vector<int64_t>();
      }
      std::vector<int64_t> ids;
      for (int64_t s : starts) ids.insert(ids.end(), tokens.begin() + s, tokens.begin() + s + a.seq + 1);
      window = nb::tensor<int64_t>(ids, {a.batch, a.seq + 1});
    }
    window = window.to(device);
    return {window.narrow(1, 0, a.seq), window.narrow(1, 1, a.seq)};
  };
  const bool amp = a.amp && device.is_cuda();
  // Cosine decay to a tenth of the peak after a linear warm-up over the first 5% of the steps.
  auto set_lr = [&](int64_t i) {
    const int64_t warm = std::max<int64_t>(1, a.steps / 20);
    const double progress =
        std::clamp(double(i - warm) / double(std::max<int64_t>(1, a.steps - warm)), 0.0, 1.0);
    const double lr = i < warm ? a.lr * double(i + 1) / double(warm)
                               : a.lr * (0.1 + 0.9 * 0.5 * (1 + std::cos(3.141592653589793 * progress)));
    for (auto& group : opt.param_groups()) group.lr = lr;
  };
  // One optimizer step over `accum` micro-batches: each backward adds loss / accum into the
  // gradients, so they hold the gradient of the mean loss. Returns that mean (on the device).
  auto step = [&](auto&& next_batch) {
    nb::Tensor total;
    for (int64_t m = 0; m < a.accum; ++m) {
      const auto [x, y] = next_batch();
      nb::Tensor loss;
      {
        nb::amp::Autocast autocast(device, nb::kBFloat16, amp);
        loss = model.loss(x, y) / static_cast<double>(a.accum);
      }
      loss.backward();
      total = m == 0 ? loss.detach() : total + loss.detach();
    }
    nb::optim::clip_grad_norm_(model.parameters(), 1.0);
    opt.step();
    opt.zero_grad();
    return total;
  };

  std::printf(
      "GPT: %lld layers, %lld heads, width %lld, vocab %lld, %.1fM parameters; batch %lld x %lld on %s%s\n",
      (long long)a.model.layers, (long long)a.model.heads, (long long)a.model.width, (long long)a.model.vocab,
      count / 1e6, (long long)a.batch * a.accum, (long long)a.seq, device.str().c_str(),
      amp ? ", bf16 autocast" : "");
  if (a.bench) {
    // The same data every step, as torch_gpt2.py: the benchmark times the model, not the input.
    const auto fixed = batch();
    const auto same = [&] { return fixed; };
    for (int64_t i = 0; i < a.warmup; ++i) step(same);
    if (device.is_cuda()) {
      nb::cuda::synchronize();
      nb::cuda::reset_peak_memory_stats();
    }
    nb::cuda::Event start(true), end(true);
    const auto wall = std::chrono::steady_clock::now();
    if (device.is_cuda()) start.record(nb::cuda::current_stream());
    nb::Tensor loss;
    for (int64_t i = 0; i < a.steps; ++i) loss = step(same);
    double ms = 0;
    if (device.is_cuda()) {
      end.record(nb::cuda::current_stream());
      end.synchronize();
      ms = start.elapsed_ms(end) / static_cast<double>(a.steps);
    } else {
      ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - wall).count() /
           a.steps;
    }
    const double peak = device.is_cuda() ? nb::cuda::max_memory_allocated() / double(1 << 30) : 0.0;
    std::printf(
        "{'mode': 'nabla', 'batch': %lld, 'seq': %lld, 'ms_per_step': %.2f, 'tokens_s': %.0f, "
        "'peak_alloc_GiB': %.2f, 'loss': %.4f}\n",
        (long long)a.batch * a.accum, (long long)a.seq, ms, a.batch * a.accum * a.seq * 1000.0 / ms, peak,
        loss.item<double>());
    if (a.profile > 0) {
      nb::profiler::start();
      for (int64_t i = 0; i < a.profile; ++i) step(same);
      std::printf("--- nabla::profiler over %lld steps ---\n%s", (long long)a.profile,
                  nb::profiler::table(nb::profiler::stop()).c_str());
    }
    return 0;
  }
  double first = 0, last = 0;
  std::ofstream log;
  if (!a.log.empty()) {
    log.open(a.log);
    if (!log) throw std::runtime_error("cannot write --log file " + a.log);
  }
  const auto started = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < a.steps; ++i) {
    set_lr(i);
    const double loss = step(batch).item<double>();
    if (log.is_open()) log << std::setprecision(9) << loss << "\n" << std::flush;
    if (i == 0) first = loss;
    last = loss;
    if (i % std::max<int64_t>(1, a.steps / 10) == 0 || i + 1 == a.steps) {
      std::printf("step %lld loss %.4f (%.1f s)\n", (long long)i, loss,
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
    }
  }
  std::printf("loss %.4f -> %.4f\n", first, last);
  if (a.sample > 0) {
    std::printf("--- sample (temperature %.2f, top-k %lld) ---\n%s%s\n---\n", a.temperature,
                (long long)a.top_k, a.prompt.c_str(),
                sample_text(model, a.prompt, a.sample, a.temperature, a.top_k, device).c_str());
  }
  return last < first ? 0 : 1;
} catch (const std::exception& e) {
  std::fprintf(stderr, "train_gpt: %s\n", e.what());
  return 2;
}
