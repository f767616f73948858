// Trains a small byte-level LLaMA (nn::models::Llama: RMSNorm, rotary tables, grouped-query
// attention, SwiGLU; Hugging Face's names) on the bytes of text files, then samples from it with
// the key/value cache. The public API only: AdamW (no decay on the norms), a cosine learning rate
// after a linear warm-up, bf16 autocast and a CUDA graph per generated token on CUDA, gradient
// clipping at 1.0, and a safetensors checkpoint that Hugging Face's LlamaForCausalLM names match.
//
//   train_llama                                       # Debian's fortunes, 1500 steps, then a sample
//   train_llama --text notes.txt --steps 3000 --save llama.safetensors
//   train_llama --load llama.safetensors --steps 0 --prompt "Q: " --sample 300   # sample only
//   train_llama --tiny --steps 40 --device cpu        # CI: a few CPU steps; fails unless the loss falls
//
// Sampling is nucleus sampling (--top-p, --temperature) through Llama::generate: the prompt in
// one pass, then one token per step against the cache.
#include <nabla/nabla.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/byte_text.h"
#include "common/flags.h"

namespace nb = nabla;
namespace models = nabla::nn::models;

namespace {

struct Args {
  // 6 layers of 384 with 6 query heads over 2 key/value heads: about 10M parameters.
  models::LlamaConfig model{.vocab = 256,
                            .context = 256,
                            .layers = 6,
                            .heads = 6,
                            .kv_heads = 2,
                            .width = 384,
                            .hidden = 1024,
                            .rope_base = 10000.0,
                            .rope_scaling = {},
                            .eps = 1e-5,
                            .tie_embeddings = false};
  int64_t batch = 32, seq = 256, steps = 1500, sample = 400;
  double lr = 1e-3, temperature = 0.8, top_p = 0.95;
  std::string text = "/usr/share/games/fortunes", prompt = "\n", save, load, device;
};

Args parse(int argc, char** argv) {
  Args a;
  examples::Flags f(argc, argv, "train_llama.cpp");
  const std::map<std::string, std::function<void()>> flags = {
      {"--tiny",
       [&] {
         a.model.layers = 2, a.model.heads = 4, a.model.kv_heads = 2, a.model.width = 64,
         a.model.hidden = 128;
         a.model.context = 64, a.batch = 8, a.seq = 64, a.lr = 3e-3;
       }},
      {"--text", [&] { a.text = f.text(); }},
      {"--device", [&] { a.device = f.text(); }},
      {"--steps", [&] { a.steps = f.whole(); }},
      {"--batch", [&] { a.batch = f.whole(); }},
      {"--seq", [&] { a.seq = f.whole(); }},
      {"--layers", [&] { a.model.layers = f.whole(); }},
      {"--width", [&] { a.model.width = f.whole(); }},
      {"--heads", [&] { a.model.heads = f.whole(); }},
      {"--kv-heads", [&] { a.model.kv_heads = f.whole(); }},
      {"--hidden", [&] { a.model.hidden = f.whole(); }},
      {"--lr", [&] { a.lr = f.real(); }},
      {"--save", [&] { a.save = f.text(); }},
      {"--load", [&] { a.load = f.text(); }},
      {"--prompt", [&] { a.prompt = f.text(); }},
      {"--sample", [&] { a.sample = f.whole(); }},
      {"--temperature", [&] { a.temperature = f.real(); }},
      {"--top-p", [&] { a.top_p = f.real(); }},
  };
  f.parse(flags);
  if (a.batch < 1 || a.seq < 2 || a.steps < 0 || a.sample < 0)
    throw std::invalid_argument("--batch must be >= 1, --seq >= 2, --steps and --sample >= 0");
  if (a.prompt.empty()) throw std::invalid_argument("--prompt must hold at least one byte");
  // Room for the training windows and for the prompt and sample.
  a.model.context = std::max({a.model.context, a.seq, static_cast<int64_t>(a.prompt.size()) + a.sample});
  return a;
}

// The prompt's bytes continued by `count` sampled tokens, as text.
std::string sample_text(models::Llama& model, const Args& a, nb::Device device) {
  std::vector<int64_t> ids;
  for (unsigned char c : a.prompt) ids.push_back(c);  // bytes 0..255, whatever char's sign
  const nb::Tensor prompt = nb::tensor<int64_t>(ids, {1, static_cast<int64_t>(ids.size())}).to(device);
  nb::Generator gen(7);
  const nb::Tensor out = model.generate(prompt, {.max_new_tokens = a.sample,
                                                 .temperature = a.temperature,
                                                 .top_p = a.top_p,
                                                 .generator = &gen,
                                                 .cuda_graph = device.is_cuda()});
  std::string text;
  for (int64_t t : out.to(nb::Device::cpu()).to_vector<int64_t>()) text.push_back(static_cast<char>(t));
  return text;
}

}  // namespace

int main(int argc, char** argv) try {
  const Args a = parse(argc, argv);
  nb::manual_seed(0);
  // --device cpu or cuda[:N]; by default the first GPU if there is one.
  const nb::Device device = !a.device.empty()          ? nb::Device::parse(a.device)
                            : nb::cuda::is_available() ? nb::Device::cuda(0)
                                                       : nb::Device::cpu();
  models::Llama model(a.model);
  if (!a.load.empty()) model.load_hf_state_dict(nb::load_safetensors(a.load).tensors);
  model.to(device);
  int64_t count = 0;
  for (const auto& p : model.parameters()) count += p.numel();
  std::printf(
      "LLaMA: %lld layers, %lld/%lld heads, width %lld, hidden %lld, %.1fM parameters; batch %lld x %lld on "
      "%s\n",
      (long long)a.model.layers, (long long)a.model.heads, (long long)a.model.kv_heads,
      (long long)a.model.width, (long long)a.model.hidden, count / 1e6, (long long)a.batch, (long long)a.seq,
      device.str().c_str());

  double first = 0, last = 0;
  if (a.steps > 0) {
    const std::vector<uint32_t> bytes = examples::read_text(a.text);
    const int64_t room = static_cast<int64_t>(bytes.size()) - a.seq - 1;
    if (room < 1) throw std::runtime_error(a.text + " holds fewer than --seq + 2 bytes");
    nb::TensorList decay, rest;  // no weight decay on the RMSNorm gains
    for (const auto& p : model.parameters()) (p.dim() >= 2 ? decay : rest).push_back(p);
    nb::optim::AdamW opt({{.params = decay, .weight_decay = 0.1}, {.params = rest, .weight_decay = 0.0}},
                         {.lr = a.lr, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8});
    nb::Generator gen(1);
    const auto started = std::chrono::steady_clock::now();
    for (int64_t i = 0; i < a.steps; ++i) {
      // Windows of seq + 1 bytes at random offsets: inputs and next-byte targets.
      std::vector<int64_t> ids;
      for (int64_t s : nb::randint(0, room, {a.batch}, {.dtype = nb::kInt64}, &gen).to_vector<int64_t>())
        ids.insert(ids.end(), bytes.begin() + s, bytes.begin() + s + a.seq + 1);
      const nb::Tensor window = nb::tensor<int64_t>(ids, {a.batch, a.seq + 1}).to(device);
      // Cosine decay to a tenth of the peak after a linear warm-up over the first 5% of the steps.
      const int64_t warm = std::max<int64_t>(1, a.steps / 20);
      const double progress =
          std::clamp(double(i - warm) / double(std::max<int64_t>(1, a.steps - warm)), 0.0, 1.0);
      for (auto& group : opt.param_groups())
        group.lr = i < warm ? a.lr * double(i + 1) / double(warm)
                            : a.lr * (0.1 + 0.45 * (1 + std::cos(3.141592653589793 * progress)));
      nb::Tensor loss;
      {
        nb::amp::Autocast autocast(device, nb::kBFloat16, device.is_cuda());
        loss = model.loss(window.narrow(1, 0, a.seq), window.narrow(1, 1, a.seq));
      }
      loss.backward();
      nb::optim::clip_grad_norm_(model.parameters(), 1.0);
      opt.step();
      opt.zero_grad();
      const bool report = i % std::max<int64_t>(1, a.steps / 10) == 0 || i + 1 == a.steps;
      if (i == 0 || report) {  // reading the loss waits for the device: only when it is printed
        last = loss.item<double>();
        if (i == 0) first = last;
        std::printf("step %lld loss %.4f (%.1f s)\n", (long long)i, last,
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
      }
    }
    std::printf("loss %.4f -> %.4f\n", first, last);
  }
  if (!a.save.empty()) {
    // Hugging Face's names (model.layers.0.self_attn.q_proj.weight, ...), written atomically.
    nb::save_safetensors(a.save, model.state_dict(), {{"format", "pt"}});
    std::printf("saved %s\n", a.save.c_str());
  }
  if (a.sample > 0) {
    nb::NoGradGuard no_grad;
    std::printf("--- sample (temperature %.2f, top-p %.2f) ---\n%s\n---\n", a.temperature, a.top_p,
                sample_text(model, a, device).c_str());
  }
  return a.steps == 0 || last < first ? 0 : 1;
} catch (const std::exception& e) {
  std::fprintf(stderr, "train_llama: %s\n", e.what());
  return 2;
}
