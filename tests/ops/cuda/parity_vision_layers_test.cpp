// The vision layers of issue 27 on CUDA against the CPU backend, from the same (rounded) inputs:
// conv_transpose2d (stride, padding, output_padding, dilation, groups, bias; cuDNN's data-gradient
// convolution) with all three gradients in float32 (TF32 off) and float16, NCHW and
// channels_last; conv1d; pixel_shuffle / pixel_unshuffle; and dropout2d, whose channel mask must
// be the CPU's for the same seed; group_norm with its gradients; interpolate in every mode and
// layout with its input gradient. The CPU computes in float64 from the rounded inputs, so the
// tolerance is the CUDA dtype's alone.
#include <cmath>

#include "parity_util.h"

namespace nabla {
namespace {

using namespace testing;  // NOLINT: test helpers

// max |actual - expected| <= tol * max |expected|.
::testing::AssertionResult close_to(const Tensor& actual, const Tensor& expected, double tol) {
  if (actual.sizes() != expected.sizes())
    return ::testing::AssertionFailure()
           << shape_str(actual.sizes()) << " != " << shape_str(expected.sizes());
  NoGradGuard no_grad;
  const Tensor e = expected.to(Device::cpu(), kFloat64), a = actual.to(Device::cpu(), kFloat64);
  const double err = max(abs(a - e)).item<double>(), scale = max(abs(e)).item<double>();
  if (std::isfinite(err) && err <= tol * scale) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "relative error " << err / scale << " > " << tol;
}

struct Grads {
  Tensor y, gx, gw, gb;
};

// y = f(x, w, b) and the gradients of sum(y * r), from leaves of `dtype` on `device`.
Grads run(const std::function<Tensor(const Tensor&, const Tensor&, const Tensor&)>& f, const Tensor& x,
          const Tensor& w, const Tensor& b, const Tensor& r, Device device, DType dtype,
          MemoryFormat format) {
  const auto leaf = [&](const Tensor& t) {
    Tensor v = t.to(device, dtype);
    if (v.dim() == 4) v = v.contiguous(format);
    return v.detach().requires_grad_(true);
  };
  Tensor xl = leaf(x), wl = leaf(w), bl = b.defined() ? leaf(b) : Tensor();
  Tensor y = f(xl, wl, bl);
  sum(y * r.to(device, dtype)).backward();
  return {y, xl.grad(), wl.grad(), bl.defined() ? bl.grad() : Tensor()};
}

void expect_parity(const char* what,
                   const std::function<Tensor(const Tensor&, const Tensor&, const Tensor&)>& f,
                   const Shape& x_shape, const Shape& w_shape, int64_t bias_size, uint64_t seed) {
  const bool bias = bias_size > 0;
  Fp32Exact exact;
  for (DType dtype : {kFloat32, kFloat16}) {
    for (MemoryFormat format : {MemoryFormat::Contiguous, MemoryFormat::ChannelsLast}) {
      SCOPED_TRACE(fmt::format("{} {} {}", what, dtype_name(dtype),
                               format == MemoryFormat::Contiguous ? "contiguous" : "channels_last"));
      // Inputs rounded to the dtype first, so both sides see the same values.
      const Tensor x = random_input(x_shape, seed, kFloat32).to(dtype).to(kFloat64);
      const Tensor w = (random_input(w_shape, seed + 1, kFloat32) * 0.3).to(dtype).to(kFloat64);
      const Tensor b = bias ? random_input({bias_size}, seed + 2, kFloat32).to(dtype).to(kFloat64) : Tensor();
      const Tensor y_shape_probe = f(x, w, b);
      const Tensor r = random_input(y_shape_probe.sizes(), seed + 3, kFloat32).to(dtype).to(kFloat64);
      const Grads want = run(f, x, w, b, r, Device::cpu(), kFloat64, format);
      const Grads got = run(f, x, w, b, r, Device::cuda(), dtype, format);
      const double tol = dtype == kFloat16 ? 4e-3 : 1e-5;
      EXPECT_TRUE(close_to(got.y, want.y, tol)) << "output";
      EXPECT_TRUE(close_to(got.gx, want.gx, tol)) << "grad input";
      EXPECT_TRUE(close_to(got.gw, want.gw, tol)) << "grad weight";
      if (bias) EXPECT_TRUE(close_to(got.gb, want.gb, tol)) << "grad bias";
      if (format == MemoryFormat::ChannelsLast && got.y.dim() == 4)
        EXPECT_TRUE(got.y.is_contiguous(MemoryFormat::ChannelsLast)) << "the layout is kept";
    }
  }
}

TEST(CudaParityVisionLayers, ConvTranspose2dMatchesTheCpu) {
  SKIP_WITHOUT_GPU();
  const uint64_t seed = test_seed();
  // A U-Net's 2x upsampling (kernel 2, stride 2), then the options together (groups 2: the weight
  // is (in, out / 2, kH, kW), the bias has out = 2 * w.size(1) entries).
  expect_parity(
      "2x2 stride 2",
      [](const Tensor& x, const Tensor& w, const Tensor& b) {
        return conv_transpose2d(x, w, b, {.stride = 2});
      },
      {2, 16, 7, 6}, {16, 4, 2, 2}, 0, seed);
  expect_parity(
      "3x3 stride 2 padding 1 output_padding 1 dilation 2 groups 2",
      [](const Tensor& x, const Tensor& w, const Tensor& b) {
        return conv_transpose2d(x, w, b,
                                {.stride = 2, .padding = 1, .output_padding = 1, .dilation = 2, .groups = 2});
      },
      {2, 16, 5, 6}, {16, 8, 3, 3}, 16, seed + 10);
}

TEST(CudaParityVisionLayers, GroupNormMatchesTheCpu) {
  SKIP_WITHOUT_GPU();
  // weight and bias are (C): the "w" of expect_parity is the weight here.
  expect_parity(
      "group_norm 4 groups",
      [](const Tensor& x, const Tensor& w, const Tensor& b) { return group_norm(x, 4, w, b); }, {3, 32, 6, 5},
      {32}, 32, test_seed());
}

// group_norm's kernels (Note [Group norm]) at more shapes: groups of one channel and of all of
// them, more positions than a block has threads, a 3-d (N, C, L) input, a mean far from zero,
// no affine parameters, float64 and bfloat16.
TEST(CudaParityVisionLayers, GroupNormKernelsMatchTheCpuAtEveryShapeAndDtype) {
  SKIP_WITHOUT_GPU();
  struct Case {
    const char* name;
    Shape x;
    int64_t groups;
    double offset;
    bool affine;
  };
  const Case cases[] = {{"groups of one channel", {2, 8, 5, 3}, 8, 0.0, true},
                        {"one group", {2, 6, 4, 4}, 1, 0.0, true},
                        {"1024 positions, mean 50", {2, 16, 32, 32}, 4, 50.0, true},
                        {"3-d (N, C, L)", {3, 12, 40}, 3, 0.0, true},
                        {"no weight or bias", {2, 8, 7, 6}, 2, 0.0, false}};
  uint64_t seed = test_seed() + 500;
  for (const Case& c : cases) {
    for (DType dtype : {kFloat64, kFloat32, kBFloat16}) {
      for (MemoryFormat format : {MemoryFormat::Contiguous, MemoryFormat::ChannelsLast}) {
        if (format == MemoryFormat::ChannelsLast && c.x.size() != 4) continue;
        SCOPED_TRACE(fmt::format("{} {} {}", c.name, dtype_name(dtype),
                                 format == MemoryFormat::Contiguous ? "contiguous" : "channels_last"));
        const int64_t channels = c.x[1];
        const Tensor x = (random_input(c.x, ++seed, kFloat32) + c.offset).to(dtype).to(kFloat64);
        const Tensor w = (random_input({channels}, ++seed, kFloat32) * 0.5 + 1.0).to(dtype).to(kFloat64);
        const Tensor b = random_input({channels}, ++seed, kFloat32).to(dtype).to(kFloat64);
        const Tensor r = random_input(c.x, ++seed, kFloat32).to(dtype).to(kFloat64);
        Grads want, got;
        for (const auto& run :
             {std::tuple{&want, Device::cpu(), kFloat64}, std::tuple{&got, Device::cuda(), dtype}}) {
          auto* out = std::get<0>(run);
          const Device device = std::get<1>(run);
          const DType type = std::get<2>(run);
          const auto leaf = [&](const Tensor& t) {
            Tensor v = t.to(device, type);
            if (v.dim() == 4) v = v.contiguous(format);
            return v.detach().requires_grad_(true);
          };
          Tensor xl = leaf(x), wl = leaf(w), bl = leaf(b);
          Tensor y = c.affine ? group_norm(xl, c.groups, wl, bl) : group_norm(xl, c.groups);
          sum(y * r.to(device, type)).backward();
          *out = {y, xl.grad(), c.affine ? wl.grad() : Tensor(), c.affine ? bl.grad() : Tensor()};
        }
        // The mean-50 case loses bfloat16's digits in x itself, not in the kernels: its
        // tolerance is the one of the normalized values that x's rounding leaves.
        const double tol = dtype == kFloat64 ? 1e-10 : dtype == kFloat32 ? 2e-5 : 2e-2;
        EXPECT_TRUE(close_to(got.y, want.y, tol)) << "output";
        EXPECT_TRUE(close_to(got.gx, want.gx, tol)) << "grad input";
        if (c.affine) {
          EXPECT_TRUE(close_to(got.gw, want.gw, tol)) << "grad weight";
          EXPECT_TRUE(close_to(got.gb, want.gb, tol)) << "grad bias";
        }
        EXPECT_EQ(got.y.dtype(), dtype);
        if (format == MemoryFormat::ChannelsLast)
          EXPECT_TRUE(got.gx.is_contiguous(format)) << "the layout is kept";
      }
    }
  }
}

TEST(CudaParityVisionLayers, GroupNormDoubleBackwardIsRefusedClearly) {
  SKIP_WITHOUT_GPU();
  const uint64_t seed = test_seed();
  Tensor x = random_input({2, 4, 3, 3}, seed, kFloat32).to(Device::cuda()).detach().requires_grad_(true);
  const Tensor r = random_input({2, 4, 3, 3}, seed + 1, kFloat32).to(Device::cuda());
  sum(group_norm(x, 2) * r).backward({}, /*retain_graph=*/false, /*create_graph=*/true);
  EXPECT_NABLA_ERROR(sum(x.grad()).backward(), "double backward through group_norm");
}

// The composed ones: adaptive_max_pool2d (max over narrowed windows), ReLU6 (clamp) and
// stochastic depth (a Bernoulli row mask, scaled by 1 / (1 - p)).
TEST(CudaParityVisionLayers, AdaptiveMaxPoolReLU6AndStochasticDepthMatchTheCpu) {
  SKIP_WITHOUT_GPU();
  uint64_t seed = test_seed() + 900;
  const std::pair<const char*, std::function<Tensor(const Tensor&)>> ops[] = {
      {"adaptive_max_pool2d (3, 2)",
       [](const Tensor& t) {
         return adaptive_max_pool2d(t, {3, 2});
       }},
      {"adaptive_max_pool2d (1, 1)",
       [](const Tensor& t) {
         return adaptive_max_pool2d(t, {1, 1});
       }},
      {"relu6", [](const Tensor& t) { return nn::activate(nn::Activation::relu6, t * 4.0); }}};
  for (const auto& [name, f] : ops) {
    for (DType dtype : {kFloat32, kFloat16}) {
      for (MemoryFormat format : {MemoryFormat::Contiguous, MemoryFormat::ChannelsLast}) {
        SCOPED_TRACE(fmt::format("{} {} {}", name, dtype_name(dtype),
                                 format == MemoryFormat::Contiguous ? "contiguous" : "channels_last"));
        const Tensor x = random_input({2, 6, 9, 7}, ++seed, kFloat32).to(dtype).to(kFloat64);
        const Tensor r = random_input(f(x).sizes(), ++seed, kFloat32).to(dtype).to(kFloat64);
        Grads want, got;
        for (auto [out, device, type] :
             {std::tuple{&want, Device::cpu(), kFloat64}, std::tuple{&got, Device::cuda(), dtype}}) {
          Tensor xl = x.to(device, type).contiguous(format).detach().requires_grad_(true);
          Tensor y = f(xl);
          sum(y * r.to(device, type)).backward();
          *out = {y, xl.grad(), Tensor(), Tensor()};
        }
        const double tol = dtype == kFloat16 ? 4e-3 : 1e-6;
        EXPECT_TRUE(close_to(got.y, want.y, tol)) << "output";
        EXPECT_TRUE(close_to(got.gx, want.gx, tol)) << "grad input";
      }
    }
  }
  // Stochastic depth on CUDA: whole rows zeroed, the rest scaled by 1 / (1 - p), the same mask
  // for the gradient, about p of the rows, and the identity in eval.
  const double p = 0.3;
  const Tensor x = (random_input({400, 3, 2, 2}, ++seed, kFloat32).abs() + 0.5).to(Device::cuda());
  Tensor xl = x.detach().requires_grad_(true);
  const Tensor y = nn::stochastic_depth(xl, p, nn::StochasticDepthMode::row, /*training=*/true);
  sum(y).backward();
  const std::vector<double> ratio = (y / x).to(Device::cpu(), kFloat64).contiguous().to_vector<double>();
  const std::vector<double> grad = xl.grad().to(Device::cpu(), kFloat64).contiguous().to_vector<double>();
  int64_t dropped = 0;
  for (size_t row = 0; row < 400; ++row) {
    const double first = ratio[row * 12];
    EXPECT_TRUE(std::abs(first) < 1e-6 || std::abs(first - 1 / (1 - p)) < 1e-5)
        << "row " << row << ": " << first;
    for (size_t i = row * 12; i < row * 12 + 12; ++i) {
      EXPECT_NEAR(ratio[i], first, 1e-5) << "row " << row << " is not one mask";
      EXPECT_NEAR(grad[i], first, 1e-5) << "row " << row << ": the gradient's mask";
    }
    dropped += std::abs(first) < 1e-6;
  }
  EXPECT_NEAR(static_cast<double>(dropped) / 400, p, 0.1);
  const Tensor eval = nn::stochastic_depth(x, p, nn::StochasticDepthMode::row, /*training=*/false);
  EXPECT_EQ(max(abs(eval - x)).item<double>(), 0.0) << "the identity in eval";
}

TEST(CudaParityVisionLayers, InterpolateMatchesTheCpu) {
  SKIP_WITHOUT_GPU();
  const uint64_t seed = test_seed();
  const Tensor x = random_input({2, 8, 9, 7}, seed, kFloat32);
  const Tensor r = random_input({2, 8, 17, 12}, seed + 1, kFloat32);
  for (Interpolation mode : {Interpolation::nearest, Interpolation::bilinear, Interpolation::bicubic}) {
    for (MemoryFormat format : {MemoryFormat::Contiguous, MemoryFormat::ChannelsLast}) {
      const InterpolateOptions o{
          .size = {{17, 12}}, .mode = mode, .align_corners = mode == Interpolation::bicubic};
      Tensor xc = x.detach().requires_grad_(true);
      Tensor xg = to_cuda(x).contiguous(format).detach().requires_grad_(true);
      Tensor want = interpolate(xc, o), got = interpolate(xg, o);
      sum(want * r).backward();
      sum(got * to_cuda(r)).backward();
      EXPECT_TRUE(close_to(got, want, 1e-5)) << static_cast<int>(mode);
      EXPECT_TRUE(close_to(xg.grad(), xc.grad(), 1e-5)) << static_cast<int>(mode) << " gradient";
      EXPECT_EQ(got.suggest_memory_format(), format);
    }
  }
}

TEST(CudaParityVisionLayers, Conv1dPixelShuffleAndDropout2dMatchTheCpu) {
  SKIP_WITHOUT_GPU();
  Fp32Exact exact;
  const uint64_t seed = test_seed();
  const Tensor x = random_input({3, 8, 33}, seed, kFloat32).requires_grad_(true);
  const Tensor w = random_input({12, 4, 5}, seed + 1, kFloat32).requires_grad_(true);
  const Conv1dOptions o{.stride = 2, .padding = 3, .dilation = 2, .groups = 2};
  const Tensor want = conv1d(x, w, {}, o);
  const Tensor got = conv1d(to_cuda(x), to_cuda(w), {}, o);
  EXPECT_TRUE(close_to(got, want, 1e-5)) << "conv1d";

  const Tensor p = random_input({2, 3, 18, 6, 4}, seed + 2, kFloat32);
  EXPECT_TRUE(close_to(pixel_shuffle(to_cuda(p), 3), pixel_shuffle(p, 3), 0)) << "pixel_shuffle";
  EXPECT_TRUE(close_to(pixel_unshuffle(to_cuda(p), 2), pixel_unshuffle(p, 2), 0)) << "pixel_unshuffle";

  const Tensor d = random_input({8, 16, 3, 3}, seed + 3, kFloat32) + 3.0;
  Generator cpu_gen(seed + 4), cuda_gen(seed + 4);
  const Tensor cpu_drop = dropout2d(d, {.p = 0.3, .generator = &cpu_gen});
  const Tensor cuda_drop =
      dropout2d(to_cuda(d).contiguous(MemoryFormat::ChannelsLast), {.p = 0.3, .generator = &cuda_gen});
  EXPECT_TRUE(close_to(cuda_drop, cpu_drop, 1e-6)) << "the same channel mask for the same seed";
}

}  // namespace
}  // namespace nabla
