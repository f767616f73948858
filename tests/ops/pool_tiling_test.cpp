// The CPU max pool fast path for disjoint windows (kernel == stride, no padding, no dilation) on
// NCHW tensors (Note [Max pool tiling fast path] in ops/cpu/pool.cpp): values, indices and
// gradients against a hand-written loop reference and against the generic kernel (reached
// through channels_last), with ties, NaN and -inf, clipped ceil_mode windows, uncovered rows and
// columns (floor mode, odd sizes), float32 and float64.
#include <cmath>
#include <limits>

#include "test_util.h"

namespace nabla {
namespace {

using namespace testing;  // NOLINT: test helpers

struct TilingCase {
  const char* name;
  Shape x;
  MaxPool2dOptions o;
};

std::vector<TilingCase> tiling_cases() {
  return {
      {"2x2 even sizes", {3, 4, 8, 6}, {.kernel = 2}},
      {"2x2 odd sizes: last row and column uncovered", {2, 3, 7, 9}, {.kernel = 2}},
      {"2x2 ceil_mode: clipped last windows", {2, 3, 7, 5}, {.kernel = 2, .ceil_mode = true}},
      {"3x3", {2, 2, 9, 10}, {.kernel = 3}},
      {"rectangular 2x3", {2, 3, 8, 9}, {.kernel = {2, 3}}},
      {"rectangular 3x2 ceil_mode", {1, 5, 10, 7}, {.kernel = {3, 2}, .ceil_mode = true}},
      {"1x1", {1, 2, 3, 4}, {.kernel = 1}},
      // Wide rows: float32 2x2 runs 4 windows at a time (SSE2), then the rest one by one.
      {"2x2 wide, odd width", {2, 3, 10, 21}, {.kernel = 2}},
      {"2x2 wide ceil_mode, odd height and width", {2, 2, 9, 19}, {.kernel = 2, .ceil_mode = true}},
      {"2x2 SmallCnn's first pool", {2, 3, 28, 28}, {.kernel = 2}},
  };
}

// The definition, in float64: each window's first maximum; the first NaN beats everything.
// Also the gradient of sum(y * gy): each output's gy lands on its argmax.
struct Reference {
  std::vector<double> values, grad_input;
  std::vector<int64_t> indices;
};

Reference reference(const std::vector<double>& xv, const std::vector<double>& gy, const Shape& x, int64_t oh,
                    int64_t ow, int64_t kh, int64_t kw) {
  const int64_t planes = x[0] * x[1], h = x[2], w = x[3];
  Reference r;
  r.grad_input.assign(xv.size(), 0.0);
  for (int64_t p = 0; p < planes; ++p) {
    for (int64_t i = 0; i < oh; ++i) {
      for (int64_t j = 0; j < ow; ++j) {
        double best = 0;
        int64_t at = -1;
        for (int64_t a = i * kh; a < std::min(i * kh + kh, h); ++a) {
          for (int64_t b = j * kw; b < std::min(j * kw + kw, w); ++b) {
            const double v = xv[(p * h + a) * w + b];
            const bool best_is_nan = at >= 0 && std::isnan(best);
            if (at < 0 || (!best_is_nan && (std::isnan(v) || v > best))) best = v, at = a * w + b;
          }
        }
        r.values.push_back(best);
        r.indices.push_back(at);
        r.grad_input[p * h * w + at] += gy[(p * oh + i) * ow + j];
      }
    }
  }
  return r;
}

// Values drawn from a few levels so that windows hold ties, with some NaN and -inf mixed in.
std::vector<double> tied_values(int64_t n, uint64_t seed) {
  const std::vector<double> u = random_input({n}, seed).to_vector<double>();
  std::vector<double> v(u.size());
  for (size_t i = 0; i < u.size(); ++i) {
    const double level = std::round(u[i] * 2.0) / 2.0;  // about 9 levels in [-2, 2]
    if (i % 23 == 5) {
      v[i] = std::numeric_limits<double>::quiet_NaN();
    } else if (i % 29 == 3) {
      v[i] = -std::numeric_limits<double>::infinity();
    } else {
      v[i] = level == 0.0 ? 0.25 : level;
    }
  }
  return v;
}

TEST(MaxPool2dTiling, ValuesIndicesAndGradientsMatchTheDefinition) {
  uint64_t seed = test_seed();
  for (DType dtype : {kFloat32, kFloat64}) {
    for (const TilingCase& c : tiling_cases()) {
      for (bool ties : {false, true}) {
        const int64_t n = numel_of(c.x);
        // Values rounded to `dtype` first, so that the float64 reference sees the same numbers.
        const Tensor x =
            tensor<double>(ties ? tied_values(n, ++seed) : random_input({n}, ++seed).to_vector<double>(), c.x)
                .to(dtype)
                .requires_grad_(true);
        const std::vector<double> xv = x.detach().to(kFloat64).to_vector<double>();
        auto [y, indices] = max_pool2d_with_indices(x, c.o);
        const std::vector<double> gy =
            random_input(y.sizes(), ++seed, dtype).to(kFloat64).to_vector<double>();
        const Reference want = reference(xv, gy, c.x, y.size(2), y.size(3), c.o.kernel.h, c.o.kernel.w);
        const std::string what =
            std::string(c.name) + (ties ? " ties " : " ") + std::string(dtype_name(dtype));
        ASSERT_TRUE(y.is_contiguous()) << what;
        EXPECT_TRUE(all_close(y, tensor<double>(want.values, y.sizes()), 0, 0)) << what;
        EXPECT_TRUE(all_close(indices, tensor<int64_t>(want.indices, y.sizes()), 0, 0)) << what;
        y.backward(tensor<double>(gy, y.sizes()).to(dtype));
        EXPECT_TRUE(all_close(x.grad(), tensor<double>(want.grad_input, c.x), 0, 0)) << what;
      }
    }
  }
}

TEST(MaxPool2dTiling, AgreesWithTheGenericKernelBitForBit) {
  // channels_last takes the generic gather kernel; contiguous NCHW takes the fast path.
  uint64_t seed = test_seed();
  for (const TilingCase& c : tiling_cases()) {
    const Tensor x = tensor<double>(tied_values(numel_of(c.x), ++seed), c.x).to(kFloat32);
    const Tensor fast_x = x.detach().requires_grad_(true);
    const Tensor slow_x = x.contiguous(MemoryFormat::ChannelsLast).detach().requires_grad_(true);
    auto [fast_y, fast_i] = max_pool2d_with_indices(fast_x, c.o);
    auto [slow_y, slow_i] = max_pool2d_with_indices(slow_x, c.o);
    EXPECT_TRUE(all_close(fast_y, slow_y, 0, 0)) << c.name;
    EXPECT_TRUE(all_close(fast_i, slow_i, 0, 0)) << c.name;
    const Tensor gy = random_input(fast_y.sizes(), ++seed, kFloat32);
    fast_y.backward(gy);
    slow_y.backward(gy.contiguous(MemoryFormat::ChannelsLast));
    EXPECT_TRUE(all_close(fast_x.grad(), slow_x.grad(), 0, 0)) << c.name;
  }
}

TEST(MaxPool2dTiling, OverlappingOrPaddedWindowsStillSumTheirGradients) {
  // Not tilings, so these take the generic kernel: stride 1 windows share elements.
  std::vector<double> v = (random_input({1, 1, 4, 4}, test_seed()) * 0.1).to_vector<double>();
  v[5] = 10.0;
  Tensor x = tensor<double>(v, {1, 1, 4, 4}).requires_grad_(true);
  max_pool2d(x, {.kernel = 2, .stride = 1}).sum().backward();  // (1, 1, 3, 3); (1, 1) is in 4 windows
  EXPECT_EQ(x.grad().to_vector<double>()[5], 4.0);
  Tensor xp = tensor<double>(v, {1, 1, 4, 4}).requires_grad_(true);
  Tensor yp = max_pool2d(xp, {.kernel = 2, .padding = 1});  // (1, 1, 3, 3), windows over the padding
  EXPECT_EQ(yp.sizes(), (Shape{1, 1, 3, 3}));
  EXPECT_EQ(yp.to_vector<double>()[4], 10.0);
}

}  // namespace
}  // namespace nabla
