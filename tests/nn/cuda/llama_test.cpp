// nn::models::Llama on CUDA against the same model on the CPU: float32 logits (TF32 off) and
// greedy generation with the key/value cache give the CPU's; under bf16 autocast the logits run
// through the fused grouped-query attention and the rotary kernel and stay within bf16's
// rounding of the float32 ones; a bf16 training step lowers the loss.
#include <gtest/gtest.h>

#include <cmath>

#include "parity_util.h"
#include "test_util.h"

namespace nb = nabla;
namespace models = nabla::nn::models;
using nabla::testing::test_seed;

namespace {

const nb::Device kGpu = nb::Device::cuda(0);

models::LlamaConfig small_llama() {
  // Head size 64 (the fused paths' sizes), 8 query heads over 2 key/value heads.
  return {.vocab = 101,
          .context = 128,
          .layers = 2,
          .heads = 8,
          .kv_heads = 2,
          .width = 512,
          .hidden = 768,
          .rope_base = 500000.0,
          .rope_scaling = nb::RotaryScaling{.original_max_positions = 64},
          .eps = 1e-5,
          .tie_embeddings = false};
}

double relative_error(const nb::Tensor& a, const nb::Tensor& b) {
  const nb::Tensor d = a.to(nb::Device::cpu(), nb::kFloat64) - b.to(nb::Device::cpu(), nb::kFloat64);
  const nb::Tensor r = b.to(nb::Device::cpu(), nb::kFloat64);
  return std::sqrt((d * d).sum().item<double>() / (r * r).sum().item<double>());
}

TEST(CudaLlama, LogitsAndGreedyGenerationMatchTheCpu) {
  SKIP_WITHOUT_GPU();
  nabla::testing::Fp32Exact exact;
  nb::manual_seed(test_seed());
  models::Llama cpu(small_llama()), gpu(small_llama());
  gpu.load_state_dict(cpu.state_dict());
  gpu.to(kGpu);
  const nb::Tensor tokens = nb::randint(0, 101, {2, 100}, {.dtype = nb::kInt64});
  nb::NoGradGuard no_grad;
  const nb::Tensor expected = cpu.logits(tokens);
  EXPECT_LT(relative_error(gpu.logits(tokens.to(kGpu)), expected), 1e-5);
  {
    nb::amp::Autocast autocast(kGpu, nb::kBFloat16);
    EXPECT_LT(relative_error(gpu.logits(tokens.to(kGpu)), expected), 3e-2);
  }
  const nb::Tensor prompt = tokens.narrow(1, 0, 20);
  const nb::Tensor on_gpu = gpu.generate(prompt.to(kGpu), {.max_new_tokens = 12}).to(nb::Device::cpu());
  const nb::Tensor on_cpu = cpu.generate(prompt, {.max_new_tokens = 12});
  EXPECT_EQ(nb::eq(on_gpu, on_cpu).to(nb::kInt64).sum().item<int64_t>(), on_cpu.numel());
}

// Generation with a CUDA graph per token (decode_step captured through make_graphed_step)
// gives the tokens of the eager loop (float32): greedy, and sampled (top-p) from one seed, the graph's
// replays drawing the numbers the eager steps draw. A step captured by hand replays at successive positions
// and gives the eager step's logits there.
TEST(CudaLlama, GraphedDecodingGivesTheEagerTokens) {
  SKIP_WITHOUT_GPU();
  nabla::testing::Fp32Exact exact;
  nb::manual_seed(test_seed());
  models::Llama model(small_llama());
  model.to(kGpu);
  const nb::Tensor prompt = nb::randint(0, 101, {2, 24}, {.dtype = nb::kInt64, .device = kGpu});
  const nb::Tensor eager = model.generate(prompt, {.max_new_tokens = 16});
  models::GenerateStats stats;
  const nb::Tensor graphed =
      model.generate(prompt, {.max_new_tokens = 16, .cuda_graph = true, .stats = &stats});
  EXPECT_EQ(nb::eq(graphed, eager).to(nb::kInt64).sum().item<int64_t>(), eager.numel());
  // The first token comes from the prompt's pass and two more from the eager warm-up steps.
  EXPECT_EQ(stats.graph_replays, 13) << stats.eager_reason;

  nb::NoGradGuard no_grad;
  models::LlamaCache cache;
  cache.capacity = 40;
  model.logits(prompt, cache);
  nb::Tensor token = prompt.narrow(1, 23, 1).clone();
  nb::Tensor position = nb::full({1}, 24.0, {.dtype = nb::kInt64, .device = kGpu});
  nb::nn::GraphedStep step(
      [&](const nb::TensorList& in) {
        nb::NoGradGuard inference;
        return model.decode_step(in[0], in[1], cache);
      },
      {.warmup = 1, .release_eager_cache = false, .adopt_inputs = true});
  models::LlamaCache reference;
  reference.capacity = 40;
  model.logits(prompt, reference);
  for (int i = 0; i < 6; ++i) {
    const nb::Tensor got = step(token, position).clone();
    const nb::Tensor expected = model.logits(token, reference).select(1, 0);
    EXPECT_LT(relative_error(got, expected), 1e-5) << "step " << i;
    position.add_(1.0);
  }
  EXPECT_GT(step.replays(), 0) << step.eager_reason();

  nb::Generator a(9), b(9);
  const models::GenerateOptions sampled{
      .max_new_tokens = 12, .temperature = 0.9, .top_p = 0.9, .generator = &a};
  models::GenerateOptions sampled_graphed = sampled;
  sampled_graphed.generator = &b;
  sampled_graphed.cuda_graph = true;
  sampled_graphed.stats = &stats;
  const nb::Tensor s1 = model.generate(prompt, sampled), s2 = model.generate(prompt, sampled_graphed);
  EXPECT_EQ(stats.graph_replays, 9) << "sampling (sort, cumsum, multinomial) must be capturable: "
                                    << stats.eager_reason;
  EXPECT_EQ(nb::eq(s1, s2).to(nb::kInt64).sum().item<int64_t>(), s1.numel());
}

TEST(CudaLlama, Bf16TrainingStepsLowerTheLoss) {
  SKIP_WITHOUT_GPU();
  nb::manual_seed(test_seed());
  models::Llama model(small_llama());
  model.to(kGpu);
  const nb::Tensor tokens = nb::randint(0, 101, {4, 129}, {.dtype = nb::kInt64, .device = kGpu});
  const nb::Tensor x = tokens.narrow(1, 0, 128), y = tokens.narrow(1, 1, 128);
  nb::optim::AdamW opt(model.parameters(), {.lr = 1e-3});
  double first = 0, last = 0;
  for (int step = 0; step < 20; ++step) {
    opt.zero_grad();
    nb::Tensor loss;
    {
      nb::amp::Autocast autocast(kGpu, nb::kBFloat16);
      loss = model.loss(x, y);
    }
    loss.backward();
    opt.step();
    (step == 0 ? first : last) = loss.item<double>();
  }
  EXPECT_LT(last, 0.7 * first) << first << " -> " << last;
}

}  // namespace
