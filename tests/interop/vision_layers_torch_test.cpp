// Vision layers against Debian's PyTorch: pixel_shuffle / pixel_unshuffle (batched, extra batch
// dims, unbatched), conv1d (stride, padding, dilation, groups, bias; unbatched) and
// conv_transpose2d (stride, padding, output_padding, groups, dilation, bias), group_norm,
// adaptive_max_pool2d, torchvision's SqueezeExcitation and interpolate (nearest, bilinear and bicubic, by
// size and by scale factor, align_corners both ways, up and down), through their nn modules where they have
// one. torch_vision_layers.py writes float64 inputs, weights, outputs and gradients under a random output
// gradient; nabla must give the same values and gradients. gradcheck for each in float64. Then Dropout2d's
// channel masks, which no other library's random stream can reproduce: whole channels zeroed, the rest scaled
// by 1 / (1 - p), about p of them, the same mask for the gradient, and the identity in eval.
//
// The interop case skips itself (with a message) only when /usr/bin/python3 cannot import torch.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <functional>
#include <string>

#include "test_util.h"
#include "torch_python.h"

namespace nabla {
namespace {

using namespace testing;  // NOLINT: test helpers
namespace fs = std::filesystem;

nn::StateDict run_torch_script() {
  const fs::path file = fs::temp_directory_path() / fmt::format("nabla_vision_{}.safetensors", ::getpid());
  const std::string command = fmt::format("/usr/bin/python3 '{}' '{}' {}",
                                          source_file("tests/interop/torch_vision_layers.py").string(),
                                          file.string(), test_seed() % 100000);
  EXPECT_EQ(std::system(command.c_str()), 0) << command;
  nn::StateDict all = load_safetensors(file.string()).tensors;
  fs::remove(file);
  return all;
}

// Runs fn on leaves made from "<name>.<input>" and compares the output and every gradient.
void expect_matches(const nn::StateDict& all, const std::string& name, const std::vector<std::string>& inputs,
                    const std::function<Tensor(const TensorList&)>& fn, double grad_tol = 1e-12) {
  SCOPED_TRACE(name);
  TensorList leaves;
  for (const auto& in : inputs) leaves.push_back(all.at(name + "." + in).detach().requires_grad_(true));
  const Tensor y = fn(leaves);
  ASSERT_EQ(y.sizes(), all.at(name + ".y").sizes());
  EXPECT_TRUE(all_close(y, all.at(name + ".y"), 1e-12, 1e-12));
  y.backward(all.at(name + ".grad_y"));
  for (size_t i = 0; i < inputs.size(); ++i)
    EXPECT_TRUE(all_close(leaves[i].grad(), all.at(name + ".grad_" + inputs[i]), grad_tol, grad_tol))
        << inputs[i];
}

TEST(InteropVisionLayers, ConvolutionsAndPixelShuffleMatchPyTorch) {
  if (!debian_torch_available()) GTEST_SKIP() << "/usr/bin/python3 cannot import torch";
  const nn::StateDict all = run_torch_script();
  nn::PixelShuffle shuffle3(3), shuffle2(2);
  nn::PixelUnshuffle unshuffle2(2), unshuffle3(3);
  expect_matches(all, "pixel_shuffle", {"x"}, [&](const TensorList& t) { return shuffle3(t[0]); });
  expect_matches(all, "pixel_shuffle_batch", {"x"}, [&](const TensorList& t) { return shuffle2(t[0]); });
  expect_matches(all, "pixel_unshuffle", {"x"}, [&](const TensorList& t) { return unshuffle2(t[0]); });
  expect_matches(all, "pixel_unshuffle_unbatched", {"x"},
                 [&](const TensorList& t) { return unshuffle3(t[0]); });
  // Conv1d with PyTorch's weights loaded by name (its state dict's keys and shapes).
  nn::Conv1d conv({.in = 6, .out = 4, .kernel = 3, .stride = 2, .padding = 2, .dilation = 2, .groups = 2});
  conv.to(kFloat64);
  conv.load_state_dict({{"weight", all.at("conv1d.weight")}, {"bias", all.at("conv1d.bias")}});
  expect_matches(all, "conv1d", {"x"}, [&](const TensorList& t) { return conv(t[0]); });
  expect_matches(all, "conv1d", {"x", "weight", "bias"}, [&](const TensorList& t) {
    return conv1d(t[0], t[1], t[2], {.stride = 2, .padding = 2, .dilation = 2, .groups = 2});
  });
  expect_matches(all, "conv1d_unbatched", {"x", "weight"},
                 [&](const TensorList& t) { return conv1d(t[0], t[1]); });
  // ConvTranspose2d with PyTorch's weights loaded by name, and the functional op with gradients.
  nn::ConvTranspose2d deconv(
      {.in = 4, .out = 6, .kernel = 3, .stride = 2, .padding = 1, .output_padding = 1, .groups = 2});
  deconv.to(kFloat64);
  deconv.load_state_dict(
      {{"weight", all.at("conv_transpose2d.weight")}, {"bias", all.at("conv_transpose2d.bias")}});
  expect_matches(all, "conv_transpose2d", {"x"}, [&](const TensorList& t) { return deconv(t[0]); });
  expect_matches(all, "conv_transpose2d", {"x", "weight", "bias"}, [&](const TensorList& t) {
    return conv_transpose2d(t[0], t[1], t[2], {.stride = 2, .padding = 1, .output_padding = 1, .groups = 2});
  });
  expect_matches(all, "conv_transpose2d_dilated", {"x", "weight"}, [&](const TensorList& t) {
    return conv_transpose2d(
        t[0], t[1], {}, {.stride = {3, 2}, .padding = {2, 0}, .output_padding = {2, 1}, .dilation = {1, 2}});
  });
  // GroupNorm with PyTorch's parameters, and without affine on a 3-d input.
  nn::GroupNorm gn(3, 12);
  gn.to(kFloat64);
  gn.load_state_dict({{"weight", all.at("group_norm.weight")}, {"bias", all.at("group_norm.bias")}});
  expect_matches(all, "group_norm", {"x"}, [&](const TensorList& t) { return gn(t[0]); });
  expect_matches(all, "group_norm", {"x", "weight", "bias"},
                 [&](const TensorList& t) { return group_norm(t[0], 3, t[1], t[2]); });
  expect_matches(all, "group_norm_3d", {"x"},
                 [&](const TensorList& t) { return group_norm(t[0], 2, {}, {}, 1e-3); });
  // interpolate, every mode.
  using I = Interpolation;
  const std::pair<const char*, InterpolateOptions> modes[] = {
      {"nearest_size", {.size = {{7, 5}}, .mode = I::nearest}},
      {"nearest_scale", {.scale_factor = 2.5, .mode = I::nearest}},
      {"nearest_down", {.size = {{3, 2}}, .mode = I::nearest}},
      {"bilinear_size", {.size = {{9, 4}}, .mode = I::bilinear}},
      {"bilinear_corners", {.size = {{9, 7}}, .mode = I::bilinear, .align_corners = true}},
      {"bilinear_scale", {.scale_factor = 1.7, .mode = I::bilinear}},
      {"bilinear_down", {.size = {{2, 3}}, .mode = I::bilinear}},
      {"bicubic_size", {.size = {{8, 11}}, .mode = I::bicubic}},
      {"bicubic_corners", {.size = {{8, 3}}, .mode = I::bicubic, .align_corners = true}},
      {"bicubic_scale", {.scale_factor = 2.0, .mode = I::bicubic}},
  };
  for (const auto& [name, options] : modes) {
    nn::Upsample up(options);
    expect_matches(all, std::string("interpolate_") + name, {"x"},
                   [&](const TensorList& t) { return up(t[0]); });
  }
  nn::AdaptiveMaxPool2d pool53({5, 3}), pool1(1);
  expect_matches(all, "adaptive_max_pool2d", {"x"}, [&](const TensorList& t) { return pool53(t[0]); });
  expect_matches(all, "adaptive_max_pool2d_global", {"x"}, [&](const TensorList& t) { return pool1(t[0]); });
  // SqueezeExcitation with torchvision's weights (MobileNetV3's form: Hardsigmoid scale).
  nn::SqueezeExcitation se({.channels = 8, .squeeze = 4, .scale_activation = nn::Activation::hardsigmoid});
  se.to(kFloat64);
  se.load_state_dict({{"fc1.weight", all.at("squeeze_excitation.fc1_w")},
                      {"fc1.bias", all.at("squeeze_excitation.fc1_b")},
                      {"fc2.weight", all.at("squeeze_excitation.fc2_w")},
                      {"fc2.bias", all.at("squeeze_excitation.fc2_b")}});
  // PyTorch's hardsigmoid backward multiplies by the float constant 1.0f / 6 even in float64.
  expect_matches(
      all, "squeeze_excitation", {"x"}, [&](const TensorList& t) { return se(t[0]); }, 1e-7);
  EXPECT_TRUE(
      all_close(se(all.at("squeeze_excitation.x")), all.at("squeeze_excitation.module_y"), 1e-12, 1e-12));
  // The round trip is exact.
  const Tensor x = all.at("pixel_shuffle.x");
  EXPECT_TRUE(all_close(pixel_unshuffle(pixel_shuffle(x, 3), 3), x, 0, 0));
}

TEST(VisionLayers, GradcheckInFloat64) {
  const uint64_t seed = test_seed();
  const Tensor x = random_input({2, 8, 3, 2}, seed, kFloat64).requires_grad_(true);
  EXPECT_TRUE(gradcheck([](const TensorList& in) { return pixel_shuffle(in[0], 2); }, {x}));
  EXPECT_TRUE(gradcheck([](const TensorList& in) { return pixel_unshuffle(in[0], 2); },
                        {random_input({2, 3, 4, 6}, seed + 1, kFloat64).requires_grad_(true)}));
  const Tensor s = random_input({2, 4, 9}, seed + 2, kFloat64).requires_grad_(true);
  const Tensor w = random_input({6, 2, 3}, seed + 3, kFloat64).requires_grad_(true);
  const Tensor b = random_input({6}, seed + 4, kFloat64).requires_grad_(true);
  EXPECT_TRUE(gradcheck(
      [](const TensorList& in) {
        return conv1d(in[0], in[1], in[2], {.stride = 2, .padding = 1, .dilation = 2, .groups = 2});
      },
      {s, w, b}));
  EXPECT_TRUE(gradcheck(
      [](const TensorList& in) {
        return conv_transpose2d(
            in[0], in[1], in[2],
            {.stride = 2, .padding = 1, .output_padding = 1, .dilation = {1, 2}, .groups = 2});
      },
      {random_input({2, 4, 3, 3}, seed + 7, kFloat64).requires_grad_(true),
       random_input({4, 3, 3, 2}, seed + 8, kFloat64).requires_grad_(true),
       random_input({6}, seed + 9, kFloat64).requires_grad_(true)}));
  EXPECT_TRUE(gradcheck([](const TensorList& in) { return group_norm(in[0], 2, in[1], in[2]); },
                        {random_input({2, 4, 3, 3}, seed + 10, kFloat64).requires_grad_(true),
                         random_input({4}, seed + 11, kFloat64).requires_grad_(true),
                         random_input({4}, seed + 12, kFloat64).requires_grad_(true)}));
  for (Interpolation mode : {Interpolation::nearest, Interpolation::bilinear, Interpolation::bicubic}) {
    EXPECT_TRUE(gradcheck(
        [mode](const TensorList& in) {
          return interpolate(in[0], {.size = {{5, 3}}, .mode = mode});
        },
        {random_input({1, 2, 3, 4}, seed + 13, kFloat64).requires_grad_(true)}));
  }
  EXPECT_TRUE(gradcheck(
      [](const TensorList& in) {
        return adaptive_max_pool2d(in[0], {3, 2});
      },
      {random_input({2, 2, 7, 5}, seed + 14, kFloat64).requires_grad_(true)}));
  // The same channel mask on every evaluation: a fixed generator seed per call.
  EXPECT_TRUE(gradcheck(
      [&](const TensorList& in) {
        Generator gen(seed + 5);
        return dropout2d(in[0], {.p = 0.5, .generator = &gen});
      },
      {random_input({3, 4, 2, 2}, seed + 6, kFloat64).requires_grad_(true)}));
}

TEST(VisionLayers, StochasticDepthDropsWholeSamplesOrTheWholeBatch) {
  manual_seed(test_seed());
  const Tensor x = random_input({400, 3, 2}, test_seed(), kFloat32) + 3.0;  // > 0
  nn::StochasticDepth row(0.25, nn::StochasticDepthMode::row), batch(0.25, nn::StochasticDepthMode::batch);
  const Tensor r = (row(x) / x).reshape({400, 6});
  EXPECT_TRUE(all_close(var(r, {1}), zeros({400}), 0, 1e-10)) << "a sample was partly dropped";
  EXPECT_TRUE(all_close(r * (r - 1.0 / 0.75), zeros_like(r), 0, 1e-6)) << "not 0 or 1 / (1 - p)";
  EXPECT_NEAR(1.0 - mean(r).item<double>() * 0.75, 0.25, 0.07) << "400 samples";
  for (int i = 0; i < 8; ++i) {
    const Tensor b = batch(x) / x;
    const double lo = min(b).item<double>(), hi = max(b).item<double>();
    EXPECT_NEAR(lo, hi, 1e-6) << "batch mode keeps or drops the whole batch";
  }
  row.eval();
  EXPECT_TRUE(row(x).is_same(x));
  EXPECT_TRUE(nn::StochasticDepth(0.0, nn::StochasticDepthMode::row)(x).is_same(x));
  EXPECT_NABLA_ERROR(nn::StochasticDepth(1.5, nn::StochasticDepthMode::row), "[0, 1]");
}

TEST(VisionLayers, Dropout2dZeroesWholeChannelsAndScalesTheRest) {
  manual_seed(test_seed());
  nn::Dropout2d drop(0.25);
  const Tensor x = (random_input({64, 32, 3, 4}, test_seed(), kFloat32) + 2.0).requires_grad_(true);  // > 0
  const Tensor y = drop(x);
  y.backward(ones_like(y));
  // Per (n, c): all zero or all x / 0.75, and the gradient is the same mask and scale.
  const Tensor ratio = (y.detach() / x.detach()).reshape({64 * 32, 12});
  const double scale = 1.0 / 0.75;
  EXPECT_TRUE(all_close(ratio * (ratio - scale), zeros_like(ratio), 0, 1e-6)) << "not 0 or 1 / (1 - p)";
  EXPECT_TRUE(all_close(var(ratio, {1}), zeros({64 * 32}), 0, 1e-10)) << "a channel was partly dropped";
  const double dropped = 1.0 - mean(ratio).item<double>() / scale;
  EXPECT_NEAR(dropped, 0.25, 0.05) << "2048 channels";
  EXPECT_TRUE(all_close(x.grad().reshape({64 * 32, 12}), ratio, 1e-6, 0));
  // 3-d (N, C, L): one draw per (n, c), as PyTorch; and eval.
  const Tensor u3 = random_input({16, 2, 6}, test_seed() + 1, kFloat32) + 2.0;
  const Tensor u = (drop(u3) / u3).reshape({32, 6});
  EXPECT_TRUE(all_close(var(u, {1}), zeros({32}), 0, 1e-10)) << "an (n, c) row was partly dropped";
  // pixel_shuffle keeps a channels_last input channels_last.
  EXPECT_TRUE(pixel_shuffle(random_input({2, 8, 3, 3}, 5, kFloat32).contiguous(MemoryFormat::ChannelsLast), 2)
                  .is_contiguous(MemoryFormat::ChannelsLast));
  drop.eval();
  EXPECT_TRUE(drop(x).is_same(x));
  EXPECT_NABLA_ERROR(dropout2d(random_input({4, 4}, 1, kFloat32)), "(N, C, H, W)");
  EXPECT_NABLA_ERROR(nn::Dropout2d(1.0), "[0, 1)");
  EXPECT_NABLA_ERROR(pixel_shuffle(random_input({1, 5, 2, 2}, 1, kFloat32), 2),
                     "divisible by upscale_factor^2");
  EXPECT_NABLA_ERROR(pixel_unshuffle(random_input({1, 1, 5, 4}, 1, kFloat32), 2),
                     "divisible by downscale_factor");
  EXPECT_NABLA_ERROR(conv1d(random_input({2, 3, 8}, 1, kFloat32), random_input({4, 3, 3, 3}, 2, kFloat32)),
                     "weight (out, in / groups, kernel)");
  const Tensor x4 = random_input({1, 4, 5, 5}, 3, kFloat32);
  EXPECT_NABLA_ERROR(conv_transpose2d(x4, random_input({3, 2, 3, 3}, 4, kFloat32)),
                     "expects 3 (weight.size(0))");
  EXPECT_NABLA_ERROR(conv_transpose2d(x4, random_input({4, 2, 3, 3}, 4, kFloat32), {}, {.output_padding = 1}),
                     "must be smaller than stride");
  // PyTorch also takes output_padding below the dilation; nabla says it does not.
  EXPECT_NABLA_ERROR(
      conv_transpose2d(x4, random_input({4, 2, 3, 3}, 4, kFloat32), {}, {.output_padding = 1, .dilation = 2}),
      "must be smaller than stride");
  EXPECT_NABLA_ERROR(interpolate(x4, {.size = {{2, 2}}, .scale_factor = 2.0}),
                     "exactly one of size and scale_factor");
  EXPECT_NABLA_ERROR(interpolate(x4, {.scale_factor = 2.0, .align_corners = true}), "not nearest");
  EXPECT_NABLA_ERROR(group_norm(x4, 3), "divide the input's 4 channels");
}

}  // namespace
}  // namespace nabla
