// CUDA conv2d (cuDNN) against references computed another way:
//  - small cases of every option (stride, padding, dilation, groups, depthwise, odd sizes, 1x1,
//    no bias) in float32 (TF32 off, then on), float64, float16 and bfloat16, NCHW and
//    channels_last: output and all three gradients against the CPU backend in float64 on the
//    same (rounded) inputs;
//  - benchmark mode against heuristics, deterministic mode run twice, mixed layouts;
//  - every convolution of ResNet-50 (torchvision v1.5) at batch 32, forward and backward, in
//    float32 NCHW (TF32 off) and float16 and bfloat16 channels_last (benchmark mode, on the
//    graph API and, deterministic, on the legacy calls), against cuDNN in float64 on the whole
//    batch; the float64 results are in turn checked against the CPU backend on the first image
//    (forward and grad_input; grad_weight sums the whole batch).
// Errors are measured as max |actual - expected| / max |expected| per tensor.
#include <array>
#include <cmath>
#include <limits>
#include <set>
#include <string>

#include "nabla/ops/cuda/conv/kernels.h"
#include "nabla/ops/detail/layer_checks.h"
#include "parity_util.h"

namespace nabla {
namespace {

using namespace testing;  // NOLINT: test helpers

// max |actual - expected| <= tol * max |expected|, computed on expected's device.
::testing::AssertionResult close_to(const Tensor& actual, const Tensor& expected, double tol) {
  if (!actual.defined() || actual.sizes() != expected.sizes()) {
    return ::testing::AssertionFailure()
           << "shape " << (actual.defined() ? shape_str(actual.sizes()) : "undefined") << " != expected "
           << shape_str(expected.sizes());
  }
  NoGradGuard no_grad;
  Tensor e = expected.to(kFloat64);
  Tensor a = actual.to(expected.device(), kFloat64);
  const double err = max(abs(a - e)).item<double>();
  const double scale = max(abs(e)).item<double>();
  if (std::isfinite(err) && err <= tol * scale) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "relative error " << err / scale << " > " << tol
                                       << " (max abs error " << err << ", max |expected| " << scale << ")";
}

double tolerance(DType dtype) {
  switch (dtype) {
    case kFloat64:
      return 1e-10;
    case kFloat32:
      return 2e-5;  // TF32 off
    case kFloat16:
      return 3e-3;
    default:
      return 2e-2;
  }
}

struct Result {
  Tensor y, grad_x, grad_w, grad_b;
};

// Forward and backward with upstream gradient g.
Result run_conv(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& g, const Conv2dOptions& o) {
  Tensor xr = x.detach().requires_grad_(true), wr = w.detach().requires_grad_(true);
  Tensor br = b.defined() ? b.detach().requires_grad_(true) : Tensor();
  Tensor y = conv2d(xr, wr, br, o);
  y.backward(g);
  return {y.detach(), xr.grad(), wr.grad(), b.defined() ? br.grad() : Tensor()};
}

::testing::AssertionResult results_close(const Result& r, const Result& ref, double tol) {
  for (auto [a, e, name] :
       {std::tuple{&r.y, &ref.y, "output"}, std::tuple{&r.grad_x, &ref.grad_x, "grad_input"},
        std::tuple{&r.grad_w, &ref.grad_w, "grad_weight"}, std::tuple{&r.grad_b, &ref.grad_b, "grad_bias"}}) {
    if (!e->defined()) continue;
    auto ok = close_to(*a, *e, tol);
    if (!ok) return ok << " in " << name;
  }
  return ::testing::AssertionSuccess();
}

struct Case {
  const char* name;
  Shape x;
  Shape w;
  Conv2dOptions options;
  bool bias = true;
};

std::vector<Case> small_cases() {
  return {
      {"3x3 padding 1", {2, 8, 9, 9}, {16, 8, 3, 3}, {.padding = 1}},
      {"stride 2", {2, 8, 9, 9}, {8, 8, 3, 3}, {.stride = 2, .padding = 1}},
      {"dilation 2", {2, 4, 10, 9}, {6, 4, 3, 3}, {.padding = 2, .dilation = 2}},
      {"groups 2", {2, 8, 7, 7}, {12, 4, 3, 3}, {.padding = 1, .groups = 2}},
      {"depthwise", {2, 8, 9, 8}, {8, 1, 3, 3}, {.stride = 2, .padding = 1, .groups = 8}},
      {"odd sizes (7x5 input, 3x2 kernel)",
       {3, 3, 7, 5},
       {5, 3, 3, 2},
       {.stride = {2, 1}, .padding = {1, 0}}},
      {"pointwise 1x1", {2, 16, 6, 5}, {8, 16, 1, 1}, {}},
      {"no bias, 5x5", {2, 4, 11, 11}, {8, 4, 5, 5}, {.stride = 2, .padding = 2}, false},
  };
}

// A seeded input of `sizes`, in `dtype`, channels_last when asked.
Tensor make_input(const Shape& sizes, uint64_t seed, DType dtype, bool channels_last) {
  Tensor t = random_input(sizes, seed, kFloat64).to(dtype);
  return channels_last ? t.contiguous(MemoryFormat::ChannelsLast) : t;
}

void check_small_cases(DType dtype, bool channels_last, double tol, uint64_t seed) {
  for (const Case& c : small_cases()) {
    Tensor x = make_input(c.x, ++seed, dtype, channels_last);
    Tensor w =
        make_input(c.w, ++seed, dtype, channels_last) * (1.0 / std::sqrt(double(c.w[1] * c.w[2] * c.w[3])));
    Tensor b = c.bias ? make_input({c.w[0]}, ++seed, dtype, false) : Tensor();
    const Shape out = conv2d(x.to(kFloat64), w.to(kFloat64), {}, c.options).sizes();
    Tensor g = make_input(out, ++seed, dtype, channels_last);
    Result ref64 =
        run_conv(x.to(kFloat64), w.to(kFloat64), b.defined() ? b.to(kFloat64) : b, g.to(kFloat64), c.options);
    Result r = run_conv(to_cuda(x), to_cuda(w), b.defined() ? to_cuda(b) : b, to_cuda(g), c.options);
    const std::string what = context(c.name, dtype, channels_last ? "channels_last" : "NCHW");
    EXPECT_TRUE(results_close(r, ref64, tol)) << what;
    EXPECT_EQ(r.y.dtype(), dtype) << what;
    EXPECT_EQ(r.y.suggest_memory_format(), x.suggest_memory_format()) << what;
    EXPECT_EQ(r.grad_x.suggest_memory_format(), x.suggest_memory_format()) << what;
  }
}

TEST(CudaParityConv, ForwardAndBackwardMatchTheCpuForEveryDtypeOptionAndLayout) {
  SKIP_WITHOUT_GPU();
  const RoutesGuard routes_guard({.conv_tf32 = false});
  uint64_t seed = test_seed();
  for (DType dtype : kFloatDTypes) {
    for (bool channels_last : {false, true}) {
      check_small_cases(dtype, channels_last, tolerance(dtype), seed += 100);
    }
  }
}

// Every route of the CUDA convolution family (ops/cuda/conv/routes.cpp) is taken, in some
// direction, by a case here as the route table chooses it, and each case's output and three
// gradients match the CPU in float64 on the same rounded inputs. A route the cases miss fails the
// test: a new route cannot skip parity.
TEST(CudaParityConv, EveryRouteMatchesTheCpu) {
  SKIP_WITHOUT_GPU();
  const RoutesGuard routes_guard({.conv_tf32 = false});
  using R = ops::cuda::ConvRoute;
  struct RouteCase {
    Case c;
    DType dtype;
    bool channels_last;
    std::array<R, 3> expected;  // forward, data gradient, filter gradient
  };
  const RouteCase cases[] = {
      {{"stem, folded", {2, 3, 16, 16}, {16, 3, 7, 7}, {.stride = 2, .padding = 3}},
       kBFloat16,
       true,
       {R::SpaceToDepth, R::Legacy, R::SpaceToDepth}},
      {{"depthwise stride 2", {2, 16, 14, 14}, {16, 1, 3, 3}, {.stride = 2, .padding = 1, .groups = 16}},
       kFloat16,
       true,
       {R::GraphApi, R::DepthwiseKernel, R::GraphApi}},
      {{"pointwise 1x1", {2, 32, 6, 5}, {16, 32, 1, 1}, {}},
       kFloat16,
       true,
       {R::PointwiseGemm, R::PointwiseGemm, R::PointwiseGemm}},
      {{"3x3, 16-bit channels_last", {2, 16, 9, 9}, {32, 16, 3, 3}, {.padding = 1}},
       kBFloat16,
       true,
       {R::GraphApi, R::GraphApi, R::GraphApi}},
      {{"3x3 float32 NCHW", {2, 8, 9, 9}, {16, 8, 3, 3}, {.padding = 1}},
       kFloat32,
       false,
       {R::Legacy, R::Legacy, R::Legacy}},
  };
  uint64_t seed = test_seed();
  std::set<ops::cuda::ConvRoute> covered;
  for (const auto& [c, dtype, channels_last, expected] : cases) {
    const Tensor x = make_input(c.x, ++seed, dtype, channels_last);
    const Tensor w =
        make_input(c.w, ++seed, dtype, channels_last) * (1.0 / std::sqrt(double(c.w[1] * c.w[2] * c.w[3])));
    const Tensor b = make_input({c.w[0]}, ++seed, dtype, false);
    const Shape out = conv2d(x.to(kFloat64), w.to(kFloat64), {}, c.options).sizes();
    const Tensor g = make_input(out, ++seed, dtype, channels_last);
    const Result ref = run_conv(x.to(kFloat64), w.to(kFloat64), b.to(kFloat64), g.to(kFloat64), c.options);
    const Result r = run_conv(to_cuda(x), to_cuda(w), to_cuda(b), to_cuda(g), c.options);
    std::string routes_taken;
    const ops::cuda::ConvDirection directions[] = {ops::cuda::ConvDirection::Forward,
                                                   ops::cuda::ConvDirection::BackwardData,
                                                   ops::cuda::ConvDirection::BackwardWeight};
    for (size_t d = 0; d < 3; ++d) {
      // The table's choice against the one this case was written for.
      const R route = ops::cuda::conv_route(directions[d], to_cuda(x), to_cuda(w), r.y,
                                            ops::conv_params(c.options), routes());
      EXPECT_EQ(route, expected[d]) << c.name << ", direction " << d << ": " << ops::cuda::route_name(route)
                                    << " instead of " << ops::cuda::route_name(expected[d]);
      covered.insert(expected[d]);
      routes_taken += std::string(routes_taken.empty() ? "" : ", ") + ops::cuda::route_name(route);
    }
    const std::string what = context(c.name, dtype, routes_taken.c_str());
    EXPECT_TRUE(results_close(r, ref, tolerance(dtype))) << what;
  }
  for (const R route : ops::cuda::conv_routes())
    EXPECT_TRUE(covered.contains(route)) << "no parity case takes the route " << ops::cuda::route_name(route);
}

// Note [Strided convolutions of few channels as space-to-depth]: stride-2 channels_last
// bfloat16 convolutions of 1 to 4 channels run folded (float16 ones unfolded). Kernels odd and
// even, square and not, padding even, odd and uneven, channel counts folded to 8 and to 16;
// output and every gradient against the CPU in float64, bfloat16 folded and float16 unfolded.
TEST(CudaParityConv, StridedFewChannelConvolutionsRunFoldedAndMatchTheCpu) {
  SKIP_WITHOUT_GPU();
  const RoutesGuard routes_guard({.cudnn_benchmark = true, .conv_tf32 = false});
  const std::vector<Case> cases = {
      {"stem 7x7 padding 3", {2, 3, 32, 30}, {16, 3, 7, 7}, {.stride = 2, .padding = 3}},
      {"1 channel, 5x5 padding 2, odd sizes", {2, 1, 15, 13}, {8, 1, 5, 5}, {.stride = 2, .padding = 2}},
      {"2 channels, 3x3 padding 1, no bias", {3, 2, 9, 10}, {8, 2, 3, 3}, {.stride = 2, .padding = 1}, false},
      {"4 channels, 4x4 no padding", {2, 4, 12, 11}, {8, 4, 4, 4}, {.stride = 2}},
      {"3x2 kernel, padding (1, 0)", {2, 3, 11, 9}, {8, 3, 3, 2}, {.stride = 2, .padding = {1, 0}}},
      {"2x2 kernel (1x1 when folded)", {2, 3, 8, 8}, {16, 3, 2, 2}, {.stride = 2}},
  };
  uint64_t seed = test_seed();
  for (DType dtype : {kFloat16, kBFloat16}) {
    for (const Case& c : cases) {
      Tensor x = make_input(c.x, ++seed, dtype, true);
      Tensor w = make_input(c.w, ++seed, dtype, true) * (1.0 / std::sqrt(double(c.w[1] * c.w[2] * c.w[3])));
      Tensor b = c.bias ? make_input({c.w[0]}, ++seed, dtype, false) : Tensor();
      const Shape out = conv2d(x.to(kFloat64), w.to(kFloat64), {}, c.options).sizes();
      Tensor g = make_input(out, ++seed, dtype, true);
      const Result ref64 = run_conv(x.to(kFloat64), w.to(kFloat64), b.defined() ? b.to(kFloat64) : b,
                                    g.to(kFloat64), c.options);
      const Result r = run_conv(to_cuda(x), to_cuda(w), b.defined() ? to_cuda(b) : b, to_cuda(g), c.options);
      const std::string what = context(c.name, dtype, "channels_last");
      EXPECT_EQ(ops::cuda::takes_space_to_depth(to_cuda(x), to_cuda(w), r.y, ops::conv_params(c.options)),
                dtype == kBFloat16)
          << what << ": which dtype folds";
      EXPECT_TRUE(results_close(r, ref64, tolerance(dtype))) << what;
      EXPECT_EQ(r.y.suggest_memory_format(), MemoryFormat::ChannelsLast) << what;
    }
  }
}

// The folded input stops at the last row and column the convolution reads: an infinity past
// them (10 rows, a 3x3 kernel of stride 2 reads 9) must not turn the output into NaNs.
TEST(CudaParityConv, FoldedConvolutionIgnoresRowsTheConvolutionNeverReads) {
  SKIP_WITHOUT_GPU();
  const Conv2dOptions o{.stride = 2};
  uint64_t seed = test_seed();
  Tensor x = make_input({2, 3, 10, 10}, ++seed, kFloat64, true);
  x.narrow(2, 9, 1).fill_(std::numeric_limits<double>::infinity());
  x.narrow(3, 9, 1).fill_(-std::numeric_limits<double>::infinity());
  Tensor w = make_input({8, 3, 3, 3}, ++seed, kFloat64, true) * 0.2;
  const Tensor expected = conv2d(x, w, {}, o);
  ASSERT_TRUE(std::isfinite(max(abs(expected)).item<double>()));
  for (DType dtype : {kFloat16, kBFloat16}) {
    NoGradGuard no_grad;
    const Tensor y = conv2d(to_cuda(x.to(dtype)), to_cuda(w.to(dtype)), {}, o);
    EXPECT_TRUE(
        close_to(y, conv2d(x.to(dtype).to(kFloat64), w.to(dtype).to(kFloat64), {}, o), tolerance(dtype)))
        << dtype_name(dtype);
  }
}

TEST(CudaParityConv, Float32WithTf32IsCloseToTheCpu) {
  SKIP_WITHOUT_GPU();
  const RoutesGuard routes_guard({.conv_tf32 = true});
  uint64_t seed = test_seed();
  for (bool channels_last : {false, true}) check_small_cases(kFloat32, channels_last, 1e-2, seed += 100);
}

TEST(CudaParityConv, BenchmarkModeMatchesHeuristicsAndCachesOncePerShape) {
  SKIP_WITHOUT_GPU();
  uint64_t seed = test_seed();
  ops::cuda::clear_conv_algorithm_cache();
  for (DType dtype : {kFloat32, kFloat16, kBFloat16}) {
    for (bool channels_last : {false, true}) {
      const Conv2dOptions o{.stride = 1, .padding = 1};
      Tensor x = to_cuda(make_input({4, 32, 14, 14}, ++seed, dtype, channels_last));
      Tensor w = to_cuda(make_input({64, 32, 3, 3}, ++seed, dtype, channels_last)) * (1.0 / 17.0);
      Tensor b = to_cuda(make_input({64}, ++seed, dtype, false));
      Tensor g = to_cuda(make_input({4, 64, 14, 14}, ++seed, dtype, channels_last));
      Result heuristic, benchmarked, again;
      {
        const RoutesGuard routes_guard({.conv_tf32 = false});
        heuristic = run_conv(x, w, b, g, o);
      }
      {
        const RoutesGuard routes_guard({.cudnn_benchmark = true, .conv_tf32 = false});
        const size_t before = ops::cuda::conv_algorithm_cache_size();
        benchmarked = run_conv(x, w, b, g, o);
        const size_t after_first = ops::cuda::conv_algorithm_cache_size();
        again = run_conv(x, w, b, g, o);
        // One search per direction on cuDNN's legacy API; channels_last 16-bit convolutions run
        // on the graph API instead (the forward's bias in its epilogue), with plans of their own.
        const bool graph = channels_last && dtype != kFloat32;
        EXPECT_EQ(after_first, before + (graph ? 0 : 3)) << "one search per direction";
        EXPECT_EQ(ops::cuda::conv_algorithm_cache_size(), after_first) << "the second call hits the cache";
      }
      const std::string what = context("benchmark", dtype, channels_last ? "channels_last" : "NCHW");
      EXPECT_TRUE(results_close(benchmarked, heuristic, tolerance(dtype))) << what;
      EXPECT_TRUE(results_close(again, benchmarked, tolerance(dtype))) << what << ": the cached choice";
      Result ref = run_conv(x.to(kFloat64), w.to(kFloat64), b.to(kFloat64), g.to(kFloat64), o);
      EXPECT_TRUE(results_close(benchmarked, ref, tolerance(dtype))) << what;
    }
  }
}

TEST(CudaParityConv, DeterministicModeRepeatsBitForBit) {
  SKIP_WITHOUT_GPU();
  const RoutesGuard routes_guard({.cudnn_benchmark = true, .cudnn_deterministic = true});
  uint64_t seed = test_seed();
  const Conv2dOptions o{.stride = 2, .padding = 1};
  Tensor x = to_cuda(make_input({8, 16, 28, 28}, ++seed, kFloat16, true));
  Tensor w = to_cuda(make_input({32, 16, 3, 3}, ++seed, kFloat16, true)) * 0.1;
  Tensor g = to_cuda(make_input({8, 32, 14, 14}, ++seed, kFloat16, true));
  Result first = run_conv(x, w, {}, g, o);
  Result second = run_conv(x, w, {}, g, o);
  EXPECT_TRUE(results_close(second, first, 0.0));
}

TEST(CudaParityConv, ChannelsLastInputWithAContiguousWeightKeepsEachLayout) {
  SKIP_WITHOUT_GPU();
  uint64_t seed = test_seed();
  const Conv2dOptions o{.padding = 1};
  Tensor x = make_input({2, 8, 6, 6}, ++seed, kFloat64, true);
  Tensor w = make_input({4, 8, 3, 3}, ++seed, kFloat64, false);
  Tensor g = make_input({2, 4, 6, 6}, ++seed, kFloat64, false);
  Result r = run_conv(to_cuda(x), to_cuda(w), {}, to_cuda(g), o);
  EXPECT_EQ(r.y.suggest_memory_format(), MemoryFormat::ChannelsLast);
  EXPECT_EQ(r.grad_x.suggest_memory_format(), MemoryFormat::ChannelsLast);
  EXPECT_TRUE(r.grad_w.is_contiguous());
  EXPECT_TRUE(results_close(r, run_conv(x, w, {}, g, o), 1e-12));
}

// A residual block's input gets two gradients: the shortcut's, which arrives first, and the 1x1
// convolution's, which the engine lets the convolution's GEMM add into the first
// (take_pending_gradient, gemm's accumulate). The sum must be the CPU's, in float32 and float16,
// and so must a 3x3 convolution's, which adds the two the usual way.
TEST(CudaParityConv, ConvolutionGradientAddedIntoThePendingOneMatchesTheCpu) {
  SKIP_WITHOUT_GPU();
  Fp32Exact exact;
  const uint64_t seed = test_seed();
  for (const DType dtype : {kFloat32, kFloat16}) {
    for (const int64_t k : {1, 3}) {
      const auto run = [&](Device device) {
        const auto cl = [&](const Tensor& t) {
          return t.to(device, dtype).contiguous(MemoryFormat::ChannelsLast);
        };
        Tensor x0 = cl(random_input({4, 16, 6, 6}, seed)).requires_grad_();
        const Tensor w = cl(random_input({24, 16, k, k}, seed + 1) * 0.2);
        const Tensor r = cl(random_input({4, 24, 6, 6}, seed + 2));
        const Tensor q = cl(random_input({4, 16, 6, 6}, seed + 3));
        const Tensor x = x0 * 1.5;  // not a leaf: the engine sums its two gradients in a buffer
        const Tensor y = conv2d(x, w, {}, {.padding = k / 2});
        const Tensor shortcut = relu(x) * q;  // recorded after the convolution: runs first backward
        ((y * r).sum() + shortcut.sum()).backward();
        return x0.grad().to(Device::cpu(), kFloat64);
      };
      const Tensor got = run(Device::cuda()), want = run(Device::cpu());
      const double tol = dtype == kFloat16 ? 2e-2 : 1e-4;
      EXPECT_TRUE(all_close(got, want, tol, tol)) << dtype_name(dtype) << " k" << k;
    }
  }
}

TEST(CudaParityConv, MismatchedDevicesGiveAClearError) {
  SKIP_WITHOUT_GPU();
  Tensor x = to_cuda(random_input({1, 2, 4, 4}, test_seed(), kFloat32));
  Tensor w = random_input({2, 2, 3, 3}, test_seed() + 1, kFloat32);
  EXPECT_NABLA_ERROR(conv2d(x, w), "conv2d", "one device", "cuda", "cpu");
}

// ---- ResNet-50 ------------------------------------------------------------------------------------

struct ResNetConv {
  const char* name;
  int64_t c, h, o, k, stride, padding;
};

// Every distinct convolution of torchvision's resnet50 (v1.5: stride 2 on the 3x3) at 224x224.
std::vector<ResNetConv> resnet50_convs() {
  return {
      {"stem 7x7/2", 3, 224, 64, 7, 2, 3},
      {"l1 1x1 64>64", 64, 56, 64, 1, 1, 0},
      {"l1 3x3 64", 64, 56, 64, 3, 1, 1},
      {"l1 1x1 64>256 (+down)", 64, 56, 256, 1, 1, 0},
      {"l1 1x1 256>64", 256, 56, 64, 1, 1, 0},
      {"l2 1x1 256>128", 256, 56, 128, 1, 1, 0},
      {"l2 3x3/2 128", 128, 56, 128, 3, 2, 1},
      {"l2 1x1 128>512", 128, 28, 512, 1, 1, 0},
      {"l2 down 1x1/2 256>512", 256, 56, 512, 1, 2, 0},
      {"l2 1x1 512>128", 512, 28, 128, 1, 1, 0},
      {"l2 3x3 128", 128, 28, 128, 3, 1, 1},
      {"l3 1x1 512>256", 512, 28, 256, 1, 1, 0},
      {"l3 3x3/2 256", 256, 28, 256, 3, 2, 1},
      {"l3 1x1 256>1024", 256, 14, 1024, 1, 1, 0},
      {"l3 down 1x1/2 512>1024", 512, 28, 1024, 1, 2, 0},
      {"l3 1x1 1024>256", 1024, 14, 256, 1, 1, 0},
      {"l3 3x3 256", 256, 14, 256, 3, 1, 1},
      {"l4 1x1 1024>512", 1024, 14, 512, 1, 1, 0},
      {"l4 3x3/2 512", 512, 14, 512, 3, 2, 1},
      {"l4 1x1 512>2048", 512, 7, 2048, 1, 1, 0},
      {"l4 down 1x1/2 1024>2048", 1024, 14, 2048, 1, 2, 0},
      {"l4 1x1 2048>512", 2048, 7, 512, 1, 1, 0},
      {"l4 3x3 512", 512, 7, 512, 3, 1, 1},
  };
}

TEST(CudaParityConv, EveryResNet50ConvolutionAtBatch32MatchesFloat64) {
  SKIP_WITHOUT_GPU();
  constexpr int64_t kBatch = 32;
  Generator gen(test_seed());
  const TensorOptions on_gpu{.dtype = kFloat16, .device = Device::cuda()};
  for (const ResNetConv& s : resnet50_convs()) {
    const Conv2dOptions o{.stride = s.stride, .padding = s.padding};
    const int64_t out = (s.h + 2 * s.padding - s.k) / s.stride + 1;
    // Inputs drawn in bfloat16 and held in float16, so every precision below sees the same values.
    const auto draw = [&](const Shape& sizes, double scale) {
      return (randn(sizes, on_gpu, &gen) * scale).to(kBFloat16).to(kFloat16);
    };
    Tensor x16 = draw({kBatch, s.c, s.h, s.h}, 1.0);
    Tensor w16 = draw({s.o, s.c, s.k, s.k}, 1.0 / std::sqrt(double(s.c * s.k * s.k)));
    Tensor g16 = draw({kBatch, s.o, out, out}, 1.0);
    Result ref = run_conv(x16.to(kFloat64), w16.to(kFloat64), {}, g16.to(kFloat64), o);

    // The float64 reference against the CPU backend on the first image.
    Tensor x0 = x16.narrow(0, 0, 1).to(Device::cpu(), kFloat64);
    Result cpu =
        run_conv(x0, w16.to(Device::cpu(), kFloat64), {}, g16.narrow(0, 0, 1).to(Device::cpu(), kFloat64), o);
    EXPECT_TRUE(close_to(ref.y.narrow(0, 0, 1), cpu.y, 1e-12)) << s.name << " output, CPU";
    EXPECT_TRUE(close_to(ref.grad_x.narrow(0, 0, 1), cpu.grad_x, 1e-12)) << s.name << " grad_input, CPU";

    {
      const RoutesGuard routes_guard({.conv_tf32 = false});
      Result r = run_conv(x16.to(kFloat32), w16.to(kFloat32), {}, g16.to(kFloat32), o);
      EXPECT_TRUE(results_close(r, ref, 1e-4)) << s.name << " float32 NCHW";
    }
    // 16-bit channels_last on both routes (Note [Convolutions on the graph API]): the graph API by
    // default, the legacy calls in deterministic mode.
    for (DType dtype : {kFloat16, kBFloat16}) {
      for (bool graph_api : {true, false}) {
        const RoutesGuard routes_guard({.cudnn_benchmark = true, .cudnn_deterministic = !graph_api});
        constexpr auto kCl = MemoryFormat::ChannelsLast;
        const auto in = [&](const Tensor& t) { return t.to(dtype).contiguous(kCl); };
        Result r = run_conv(in(x16), in(w16), {}, in(g16), o);
        const std::string what = context(s.name, dtype, graph_api ? "graph API" : "legacy calls");
        EXPECT_TRUE(results_close(r, ref, dtype == kFloat16 ? 1e-2 : 2e-2)) << what;
        EXPECT_EQ(r.y.suggest_memory_format(), kCl) << what;
      }
    }
  }
}

}  // namespace
}  // namespace nabla
