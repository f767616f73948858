// Depthwise convolutions on CUDA: cuDNN's graph-API route (Note [Grouped convolutions on the graph
// API]) and nabla's stride-2 data-gradient kernel (Note [Depthwise convolutions]), against
// references computed another way:
//  - output and all three gradients against the CPU backend in float64 on the same rounded
//    inputs, for every vector width the kernel picks (1, 2, 4, 8 channels), a channel count that
//    ends in a partial tile, odd and even sizes, 3x3 and 5x5, strides 1 and 2, asymmetric padding
//    and dilation (the cases the kernel leaves to cuDNN);
//  - MobileNetV2's and EfficientNet-B0's shapes against cuDNN in float64 (a dtype the kernel
//    never takes);
//  - two runs bit for bit.
#include <cmath>

#include "parity_util.h"

namespace nabla {
namespace {

using namespace testing;  // NOLINT: test helpers

struct Grads {
  Tensor y, grad_x, grad_w, grad_b;
};

Grads run(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& g, const Conv2dOptions& o) {
  Tensor xr = x.detach().requires_grad_(true), wr = w.detach().requires_grad_(true);
  Tensor br = b.defined() ? b.detach().requires_grad_(true) : Tensor();
  Tensor y = conv2d(xr, wr, br, o);
  y.backward(g);
  return {y.detach(), xr.grad(), wr.grad(), b.defined() ? br.grad() : Tensor()};
}

// max |actual - expected| / max |expected| over the four results.
::testing::AssertionResult close(const Grads& a, const Grads& e, double tol) {
  NoGradGuard no_grad;
  const std::tuple<const Tensor*, const Tensor*, const char*> pairs[] = {
      {&a.y, &e.y, "output"},
      {&a.grad_x, &e.grad_x, "grad_input"},
      {&a.grad_w, &e.grad_w, "grad_weight"},
      {&a.grad_b, &e.grad_b, "grad_bias"}};
  for (const auto& [actual, expected, name] : pairs) {
    if (!expected->defined()) continue;
    if (actual->sizes() != expected->sizes())
      return ::testing::AssertionFailure() << name << ": shape " << shape_str(actual->sizes());
    const Tensor ex = expected->to(kFloat64);
    const double err = max(abs(actual->to(expected->device(), kFloat64) - ex)).item<double>();
    const double scale = max(abs(ex)).item<double>();
    if (!(std::isfinite(err) && scale > 0 && err <= tol * scale))
      return ::testing::AssertionFailure() << name << ": relative error " << err / scale << " > " << tol;
  }
  return ::testing::AssertionSuccess();
}

double tolerance(DType dtype) {
  return dtype == kFloat32 ? 2e-5 : dtype == kFloat16 ? 3e-3 : 2e-2;
}

struct Case {
  const char* name;
  int64_t n, c, h, k;
  Conv2dOptions options;
  bool bias = false;
};

struct Inputs {
  Tensor x, w, b, g;
};

// Seeded inputs in `dtype`, activations channels_last, on the CPU.
Inputs make_inputs(const Case& c, DType dtype, uint64_t seed) {
  Inputs in;
  in.x = random_input({c.n, c.c, c.h, c.h}, seed, kFloat64).to(dtype).contiguous(MemoryFormat::ChannelsLast);
  in.w = (random_input({c.c, 1, c.k, c.k}, seed + 1, kFloat64) * (1.0 / c.k)).to(dtype);
  if (c.bias) in.b = random_input({c.c}, seed + 2, kFloat64).to(dtype);
  Conv2dOptions o = c.options;
  o.groups = c.c;
  const Shape out = conv2d(in.x.to(kFloat64), in.w.to(kFloat64), {}, o).sizes();
  in.g = random_input(out, seed + 3, kFloat64).to(dtype).contiguous(MemoryFormat::ChannelsLast);
  return in;
}

Grads run_cuda(const Inputs& in, const Case& c) {
  Conv2dOptions o = c.options;
  o.groups = c.c;
  return run(to_cuda(in.x), to_cuda(in.w), in.b.defined() ? to_cuda(in.b) : Tensor(), to_cuda(in.g), o);
}

// The same convolution in float64 on CUDA: cuDNN's, from the same rounded inputs.
Grads run_cuda_float64(const Inputs& in, const Case& c) {
  Conv2dOptions o = c.options;
  o.groups = c.c;
  const auto f64 = [](const Tensor& t) { return t.defined() ? to_cuda(t.to(kFloat64)) : Tensor(); };
  return run(f64(in.x), f64(in.w), f64(in.b), f64(in.g), o);
}

TEST(CudaParityDepthwiseConv, ForwardAndGradientsMatchTheCpuForEveryWidthAndOption) {
  SKIP_WITHOUT_GPU();
  const Case cases[] = {
      {"3 channels (width 1), stride 2", 2, 3, 9, 3, {.stride = 2, .padding = 1}, true},
      {"6 channels (width 2), 5x5 stride 2, odd size", 2, 6, 11, 5, {.stride = 2, .padding = 2}},
      {"12 channels (width 4 or 8), stride 2, even size", 3, 12, 8, 3, {.stride = 2, .padding = 1}, true},
      {"96 channels, 5x5 stride 2", 2, 96, 13, 5, {.stride = 2, .padding = 2}},
      {"320 channels (a partial second tile), stride 2", 2, 320, 6, 3, {.stride = 2, .padding = 1}, true},
      {"5x5 stride 1", 2, 16, 11, 5, {.padding = 2}},
      {"asymmetric padding", 3, 16, 8, 3, {.stride = 2, .padding = {1, 0}}, true},
      {"dilation 2, stride (2, 1)", 2, 16, 12, 3, {.stride = {2, 1}, .padding = 2, .dilation = 2}},
      {"no padding", 2, 24, 7, 3, {.stride = 2}},
  };
  uint64_t seed = test_seed();
  for (DType dtype : {kFloat32, kFloat16, kBFloat16}) {
    for (const Case& c : cases) {
      const Inputs in = make_inputs(c, dtype, seed += 10);
      Conv2dOptions o = c.options;
      o.groups = c.c;
      const Grads ref = run(in.x.to(kFloat64), in.w.to(kFloat64),
                            in.b.defined() ? in.b.to(kFloat64) : Tensor(), in.g.to(kFloat64), o);
      const Grads got = run_cuda(in, c);
      EXPECT_TRUE(close(got, ref, tolerance(dtype))) << context(c.name, dtype);
      EXPECT_EQ(got.y.suggest_memory_format(), MemoryFormat::ChannelsLast) << context(c.name, dtype);
      EXPECT_EQ(got.grad_x.suggest_memory_format(), MemoryFormat::ChannelsLast) << context(c.name, dtype);
    }
  }
}

TEST(CudaParityDepthwiseConv, MobileNetAndEfficientNetShapesMatchFloat64AndRepeatBitForBit) {
  SKIP_WITHOUT_GPU();
  Fp32Exact exact;  // float32 against float64 with a tight tolerance
  // MobileNetV2's and EfficientNet-B0's depthwise convolutions at batch 8.
  const Case cases[] = {
      {"mbv2 32 112 s1", 8, 32, 112, 3, {.padding = 1}},
      {"mbv2 96 112 s2", 8, 96, 112, 3, {.stride = 2, .padding = 1}},
      {"mbv2 960 7 s1", 8, 960, 7, 3, {.padding = 1}},
      {"effnet 144 56 5x5 s2", 8, 144, 56, 5, {.stride = 2, .padding = 2}},
      {"effnet 672 14 5x5 s1", 8, 672, 14, 5, {.padding = 2}},
      {"effnet 672 14 5x5 s2", 8, 672, 14, 5, {.stride = 2, .padding = 2}},
  };
  uint64_t seed = test_seed() + 1000;
  for (DType dtype : {kFloat16, kBFloat16, kFloat32}) {
    for (const Case& c : cases) {
      const Inputs in = make_inputs(c, dtype, seed += 10);
      const Grads ours = run_cuda(in, c), again = run_cuda(in, c), ref = run_cuda_float64(in, c);
      // The 16-bit rounding of each result is the gap; float32 sums up to 100352 products per
      // weight-gradient element.
      EXPECT_TRUE(close(ours, ref, dtype == kFloat32 ? 1e-4 : tolerance(dtype))) << context(c.name, dtype);
      EXPECT_TRUE(close(again, ours, 0.0)) << context(c.name, dtype) << ": not bit for bit";
    }
  }
}

}  // namespace
}  // namespace nabla
