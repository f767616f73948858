// Trains the GPT of gpt.h with nabla's public API: AdamW (no decay on biases and norms), bf16
// autocast on CUDA, gradient clipping at 1.0, on synthetic tokens or on a token file.
//
//   train_gpt --bench [--batch 16] [--seq 1024] [--steps 30] [--warmup 10]   # GPT-2 124M speed
//   train_gpt --data tokens.bin --layers 4 --heads 4 --width 256 --vocab 256 --steps 200
//   train_gpt --tiny --steps 30          # a small model on counting sequences; fails unless the loss falls
//
// Token files are nanoGPT's raw uint16 or llm.c's (a 256 x int32 header with magic 20240520,
// its version and the token count, then uint16 tokens), told apart by the header.
// --bench prints one line of tokens/s, ms/step and peak memory, the figures
// ../shared/bench/torch_gpt2.py prints for PyTorch.
#include <nabla/nabla.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "gpt.h"

namespace nb = nabla;

namespace {

struct Args {
  gpt::Config model;
  int64_t batch = 16, seq = 1024, steps = 30, warmup = 10;
  double lr = 6e-4;
  bool bench = false, amp = true;
  std::string data;
};

Args parse(int argc, char** argv) {
  Args a;
  auto number = [&](int& i) {
    if (i + 1 >= argc) throw std::invalid_argument(std::string(argv[i]) + " needs a value");
    return std::stoll(argv[++i]);
  };
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--bench")
      a.bench = true;
    else if (flag == "--no-amp")
      a.amp = false;
    else if (flag == "--tiny")
      a.model = {.vocab = 256, .context = 64, .layers = 2, .heads = 2, .width = 64}, a.batch = 4, a.seq = 64;
    else if (flag == "--batch")
      a.batch = number(i);
    else if (flag == "--seq")
      a.seq = number(i);
    else if (flag == "--steps")
      a.steps = number(i);
    else if (flag == "--warmup")
      a.warmup = number(i);
    else if (flag == "--layers")
      a.model.layers = number(i);
    else if (flag == "--heads")
      a.model.heads = number(i);
    else if (flag == "--width")
      a.model.width = number(i);
    else if (flag == "--vocab")
      a.model.vocab = number(i);
    else if (flag == "--data" && i + 1 < argc)
      a.data = argv[++i];
    else
      throw std::invalid_argument("unknown flag " + flag + " (see the comment at the top of train_gpt.cpp)");
  }
  a.model.context = std::max(a.model.context, a.seq);
  return a;
}

// The tokens of a nanoGPT (raw uint16) or llm.c (header + uint16) file.
std::vector<uint16_t> read_tokens(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open token file " + path);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  size_t begin = 0;
  int32_t header[256];
  if (bytes.size() >= sizeof(header)) {
    std::memcpy(header, bytes.data(), sizeof(header));
    if (header[0] == 20240520) {
      begin = sizeof(header);
      if (bytes.size() != begin + 2 * static_cast<size_t>(header[2]))
        throw std::runtime_error(path + ": llm.c header says " + std::to_string(header[2]) +
                                 " tokens, the file has " + std::to_string((bytes.size() - begin) / 2));
    }
  }
  if ((bytes.size() - begin) % 2 != 0) throw std::runtime_error(path + ": odd byte count for uint16 tokens");
  std::vector<uint16_t> tokens((bytes.size() - begin) / 2);
  std::memcpy(tokens.data(), bytes.data() + begin, tokens.size() * 2);
  return tokens;
}

}  // namespace

int main(int argc, char** argv) try {
  const Args a = parse(argc, argv);
  nb::manual_seed(0);
  const nb::Device device = nb::cuda::is_available() ? nb::Device::cuda(0) : nb::Device::cpu();
  gpt::GPT model(a.model);
  model.to(device);
  nb::TensorList decay, rest;
  for (const auto& p : model.parameters()) (p.dim() >= 2 ? decay : rest).push_back(p);
  nb::optim::AdamW opt({{.params = decay, .weight_decay = 0.1}, {.params = rest, .weight_decay = 0.0}},
                       {.lr = a.lr, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8});
  int64_t count = 0;
  for (const auto& p : model.parameters()) count += p.numel();

  std::vector<uint16_t> tokens;
  if (!a.data.empty()) tokens = read_tokens(a.data);
  nb::Generator gen(1);
  auto batch = [&]() -> std::pair<nb::Tensor, nb::Tensor> {
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
      const auto starts = nb::randint(0, static_cast<int64_t>(tokens.size()) - a.seq - 1, {a.batch},
                                      {.dtype = nb::kInt64}, &gen)
                              .to_vector<int64_t>();
      std::vector<int64_t> ids;
      for (int64_t s : starts) ids.insert(ids.end(), tokens.begin() + s, tokens.begin() + s + a.seq + 1);
      window = nb::tensor<int64_t>(ids, {a.batch, a.seq + 1});
    }
    window = window.to(device);
    return {window.narrow(1, 0, a.seq), window.narrow(1, 1, a.seq)};
  };
  const bool amp = a.amp && device.is_cuda();
  auto step = [&](const nb::Tensor& x, const nb::Tensor& y) {
    nb::Tensor loss;
    {
      nb::amp::Autocast autocast(device, nb::kBFloat16, amp);
      loss = model.loss(x, y);
    }
    loss.backward();
    nb::optim::clip_grad_norm_(model.parameters(), 1.0);
    opt.step();
    opt.zero_grad();
    return loss.detach();
  };

  std::printf(
      "GPT: %lld layers, %lld heads, width %lld, vocab %lld, %.1fM parameters; batch %lld x %lld on %s%s\n",
      (long long)a.model.layers, (long long)a.model.heads, (long long)a.model.width, (long long)a.model.vocab,
      count / 1e6, (long long)a.batch, (long long)a.seq, device.str().c_str(), amp ? ", bf16 autocast" : "");
  if (a.bench) {
    // The same data every step, as torch_gpt2.py: the benchmark times the model, not the input.
    const auto [x, y] = batch();
    for (int64_t i = 0; i < a.warmup; ++i) step(x, y);
    if (device.is_cuda()) {
      nb::cuda::synchronize();
      nb::cuda::reset_peak_memory_stats();
    }
    nb::cuda::Event start(true), end(true);
    const auto wall = std::chrono::steady_clock::now();
    if (device.is_cuda()) start.record(nb::cuda::current_stream());
    nb::Tensor loss;
    for (int64_t i = 0; i < a.steps; ++i) loss = step(x, y);
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
        (long long)a.batch, (long long)a.seq, ms, a.batch * a.seq * 1000.0 / ms, peak, loss.item<double>());
    return 0;
  }
  double first = 0, last = 0;
  for (int64_t i = 0; i < a.steps; ++i) {
    const auto [x, y] = batch();
    const double loss = step(x, y).item<double>();
    if (i == 0) first = loss;
    last = loss;
    if (i % 10 == 0 || i + 1 == a.steps) std::printf("step %lld loss %.4f\n", (long long)i, loss);
  }
  std::printf("loss %.4f -> %.4f\n", first, last);
  return last < first ? 0 : 1;
} catch (const std::exception& e) {
  std::fprintf(stderr, "train_gpt: %s\n", e.what());
  return 2;
}
