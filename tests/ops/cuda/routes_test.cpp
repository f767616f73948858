// Routes reach the CUDA backend (the guard itself is tested in tests/ops/routes_test.cpp), shown
// by what the routes change, against references computed another way:
//  - cudnn_benchmark: a convolution under a guard with benchmark mode adds its own entry to
//    cuDNN's algorithm cache (the flag is part of the key), and both modes match the CPU;
//  - conv_tf32: a float32 convolution of a large reduction matches float64 on the CPU to float32
//    precision with TF32 off, and is further from it with TF32 on (the default);
//  - the backward of a convolution, and of linear (matmul_tf32), runs on the routes in force at
//    its forward, not at backward.
#include "nabla/ops/cuda/conv/kernels.h"
#include "parity_util.h"

namespace nabla {
namespace {

using namespace testing;  // NOLINT: test helpers

// max |actual - expected| / max |expected|, in float64 on the CPU.
double relative_error(const Tensor& actual, const Tensor& expected) {
  NoGradGuard no_grad;
  const Tensor e = expected.to(Device::cpu(), kFloat64), a = actual.to(Device::cpu(), kFloat64);
  EXPECT_EQ(a.sizes(), e.sizes());
  return max(abs(a - e)).item<double>() / max(abs(e)).item<double>();
}

// float32 without TF32 rounds only the accumulation; TF32 rounds the inputs to 10 mantissa bits.
constexpr double kFloat32Tolerance = 2e-5;
constexpr double kTf32Tolerance = 1e-2;

TEST(CudaRoutes, BenchmarkModeOfAGuardReachesTheConvolutionAlgorithmCache) {
  SKIP_WITHOUT_GPU();
  uint64_t seed = test_seed();
  const Tensor x = random_values({4, 16, 12, 12}, ++seed, kFloat32);
  const Tensor w = random_values({32, 16, 3, 3}, ++seed, kFloat32) * (1.0 / 12.0);
  const Conv2dOptions o{.padding = 1};
  const Tensor expected = conv2d(x.to(kFloat64), w.to(kFloat64), {}, o);
  NoGradGuard no_grad;  // the forward alone: one cached choice per mode
  ASSERT_FALSE(routes().cudnn_benchmark);
  ops::cuda::clear_conv_algorithm_cache();
  const Tensor heuristic = conv2d(to_cuda(x), to_cuda(w), {}, o);
  const size_t after_heuristic = ops::cuda::conv_algorithm_cache_size();
  EXPECT_GT(after_heuristic, 0u) << "a float32 NCHW convolution runs on cuDNN and caches its choice";
  Tensor benchmarked;
  size_t after_benchmark = 0;
  {
    const RoutesGuard guard({.cudnn_benchmark = true});
    benchmarked = conv2d(to_cuda(x), to_cuda(w), {}, o);
    after_benchmark = ops::cuda::conv_algorithm_cache_size();
  }
  EXPECT_GT(after_benchmark, after_heuristic) << "benchmark mode searched a choice of its own";
  // Back on the default routes the same convolution finds the heuristic choice again.
  const Tensor again = conv2d(to_cuda(x), to_cuda(w), {}, o);
  EXPECT_EQ(ops::cuda::conv_algorithm_cache_size(), after_benchmark);
  EXPECT_LT(relative_error(heuristic, expected), kTf32Tolerance);
  EXPECT_LT(relative_error(benchmarked, expected), kTf32Tolerance);
  EXPECT_LT(relative_error(again, expected), kTf32Tolerance);
}

// A float32 channels_last convolution (the NHWC layout cuDNN's tensor-core kernels read) of 512
// channels x 3x3: a reduction of 4608 products, over which TF32's rounded inputs show.
struct LargeReduction {
  Tensor x, w, g;
  Conv2dOptions o{.padding = 1};
};

LargeReduction large_reduction(uint64_t seed) {
  const auto cl = [](const Tensor& t) { return t.contiguous(MemoryFormat::ChannelsLast); };
  return {.x = cl(random_values({4, 512, 8, 8}, seed, kFloat32)),
          .w = cl(random_values({128, 512, 3, 3}, seed + 1, kFloat32) * (1.0 / 68.0)),
          .g = cl(random_values({4, 128, 8, 8}, seed + 2, kFloat32))};
}

TEST(CudaRoutes, ConvTf32OfAGuardReachesCudnn) {
  SKIP_WITHOUT_GPU();
  EXPECT_TRUE(routes().conv_tf32);
  const LargeReduction c = large_reduction(test_seed());
  const Tensor expected = conv2d(c.x.to(kFloat64), c.w.to(kFloat64), {}, c.o);
  NoGradGuard no_grad;
  Tensor exact;
  {
    const RoutesGuard guard({.conv_tf32 = false});
    exact = conv2d(to_cuda(c.x), to_cuda(c.w), {}, c.o);
  }
  const Tensor fast = conv2d(to_cuda(c.x), to_cuda(c.w), {}, c.o);
  const double exact_error = relative_error(exact, expected), fast_error = relative_error(fast, expected);
  EXPECT_LT(exact_error, kFloat32Tolerance) << "TF32 off: float32 inputs";
  EXPECT_LT(fast_error, kTf32Tolerance);
  EXPECT_GT(fast_error, 4 * exact_error)
      << "TF32 on should round the inputs (errors " << fast_error << " vs " << exact_error << ")";
}

// The gradients of conv2d(x, w) built under `forward_routes` and run backward under the default
// routes, and the float64 CPU reference.
struct Gradients {
  Tensor dx, dw;
};

Gradients backward_after_the_guard(const LargeReduction& c, const Routes& forward_routes) {
  const Tensor x = to_cuda(c.x).requires_grad_(true), w = to_cuda(c.w).requires_grad_(true);
  Tensor y;
  {
    const RoutesGuard guard(forward_routes);
    y = conv2d(x, w, {}, c.o);
  }
  EXPECT_TRUE(routes().conv_tf32) << "the backward runs where TF32 is in force";
  y.backward(to_cuda(c.g));
  return {x.grad(), w.grad()};
}

TEST(CudaRoutes, TheBackwardRunsOnTheRoutesOfItsForward) {
  SKIP_WITHOUT_GPU();
  const LargeReduction c = large_reduction(test_seed());
  const Tensor x = c.x.to(kFloat64).requires_grad_(true), w = c.w.to(kFloat64).requires_grad_(true);
  conv2d(x, w, {}, c.o).backward(c.g.to(kFloat64));
  const Gradients exact = backward_after_the_guard(c, {.conv_tf32 = false});
  EXPECT_LT(relative_error(exact.dx, x.grad()), kFloat32Tolerance) << "grad_input";
  EXPECT_LT(relative_error(exact.dw, w.grad()), kFloat32Tolerance) << "grad_weight";
  // The same backward of a forward built under TF32: what the first would give had it taken the
  // routes in force at backward time.
  const Gradients fast = backward_after_the_guard(c, {.conv_tf32 = true});
  EXPECT_GT(relative_error(fast.dx, x.grad()), 4 * relative_error(exact.dx, x.grad()))
      << "TF32 does not show in grad_input at this shape; the test cannot tell the routes apart";
}

// linear's gradients under a guard at backward time: a forward built without TF32 keeps float32
// gradients though TF32 is on when backward runs, and one built with TF32 keeps TF32 though it is
// off by then.
TEST(CudaRoutes, LinearBackwardRunsOnTheMatmulRoutesOfItsForward) {
  SKIP_WITHOUT_GPU();
  EXPECT_FALSE(routes().matmul_tf32);
  uint64_t seed = test_seed();
  const Tensor x = random_values({64, 4096}, ++seed, kFloat32);
  const Tensor w = random_values({256, 4096}, ++seed, kFloat32) * (1.0 / 64.0);
  const Tensor g = random_values({64, 256}, ++seed, kFloat32);
  const Tensor x64 = x.to(kFloat64).requires_grad_(true), w64 = w.to(kFloat64).requires_grad_(true);
  linear(x64, w64, {}).backward(g.to(kFloat64));
  const auto run = [&](const Routes& forward_routes, const Routes& backward_routes) {
    const Tensor xc = to_cuda(x).requires_grad_(true), wc = to_cuda(w).requires_grad_(true);
    Tensor y;
    {
      const RoutesGuard guard(forward_routes);
      y = linear(xc, wc, {});
    }
    const RoutesGuard guard(backward_routes);
    y.backward(to_cuda(g));
    return Gradients{xc.grad(), wc.grad()};
  };
  const Gradients exact = run({.matmul_tf32 = false}, {.matmul_tf32 = true});
  const Gradients fast = run({.matmul_tf32 = true}, {.matmul_tf32 = false});
  const double exact_dx = relative_error(exact.dx, x64.grad()),
               exact_dw = relative_error(exact.dw, w64.grad());
  EXPECT_LT(exact_dx, kFloat32Tolerance) << "grad_input";
  EXPECT_LT(exact_dw, kFloat32Tolerance) << "grad_weight";
  EXPECT_GT(relative_error(fast.dx, x64.grad()), 4 * exact_dx) << "grad_input of the TF32 forward";
  EXPECT_GT(relative_error(fast.dw, w64.grad()), 4 * exact_dw) << "grad_weight of the TF32 forward";
}

}  // namespace
}  // namespace nabla
