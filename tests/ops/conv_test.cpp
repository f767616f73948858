// conv2d on the CPU: the forward against a naive seven-loop convolution, float64 gradcheck of
// every option (stride, padding, dilation, groups, depthwise, odd sizes, channels_last and
// strided inputs, no bias), layouts, reduced-precision dtypes and the error messages.
#include "test_util.h"

namespace nabla {
namespace {

using namespace testing;  // NOLINT: test helpers

// The definition, one output element at a time, in double.
Tensor naive_conv2d(const Tensor& x, const Tensor& w, const Tensor& b, const Conv2dOptions& o) {
  const int64_t n = x.size(0), c = x.size(1), h = x.size(2), wd = x.size(3);
  const int64_t oc = w.size(0), cg = w.size(1), kh = w.size(2), kw = w.size(3);
  const int64_t og = oc / o.groups;
  const int64_t ho = (h + 2 * o.padding[0] - o.dilation[0] * (kh - 1) - 1) / o.stride[0] + 1;
  const int64_t wo = (wd + 2 * o.padding[1] - o.dilation[1] * (kw - 1) - 1) / o.stride[1] + 1;
  const std::vector<double> xv = x.to(kFloat64).contiguous().to_vector<double>();
  const std::vector<double> wv = w.to(kFloat64).contiguous().to_vector<double>();
  const std::vector<double> bv =
      b.defined() ? b.to(kFloat64).to_vector<double>() : std::vector<double>(oc, 0.0);
  std::vector<double> y(static_cast<size_t>(n * oc * ho * wo));
  for (int64_t in = 0; in < n; ++in)
    for (int64_t io = 0; io < oc; ++io)
      for (int64_t oh = 0; oh < ho; ++oh)
        for (int64_t ow = 0; ow < wo; ++ow) {
          double acc = bv[io];
          const int64_t group = io / og;
          for (int64_t ic = 0; ic < cg; ++ic)
            for (int64_t i = 0; i < kh; ++i)
              for (int64_t j = 0; j < kw; ++j) {
                const int64_t ih = oh * o.stride[0] - o.padding[0] + i * o.dilation[0];
                const int64_t iw = ow * o.stride[1] - o.padding[1] + j * o.dilation[1];
                if (ih < 0 || ih >= h || iw < 0 || iw >= wd) continue;
                const int64_t xc = group * cg + ic;
                acc += xv[((in * c + xc) * h + ih) * wd + iw] * wv[((io * cg + ic) * kh + i) * kw + j];
              }
          y[((in * oc + io) * ho + oh) * wo + ow] = acc;
        }
  return tensor<double>(y, {n, oc, ho, wo});
}

struct Case {
  const char* name;
  Shape x;  // (N, C, H, W)
  Shape w;  // (O, C / groups, kH, kW)
  Conv2dOptions options;
  bool bias = true;
};

std::vector<Case> cases() {
  return {
      {"3x3", {2, 3, 6, 6}, {4, 3, 3, 3}, {}},
      {"stride 2, padding 1", {2, 3, 7, 7}, {4, 3, 3, 3}, {.stride = 2, .padding = 1}},
      {"dilation 2", {1, 2, 7, 8}, {3, 2, 3, 3}, {.padding = 2, .dilation = 2}},
      {"groups 2", {2, 4, 5, 5}, {6, 2, 3, 3}, {.padding = 1, .groups = 2}},
      {"depthwise", {2, 4, 6, 5}, {4, 1, 3, 3}, {.stride = 2, .padding = 1, .groups = 4}},
      {"odd sizes (7x5 input, 3x2 kernel)",
       {2, 3, 7, 5},
       {2, 3, 3, 2},
       {.stride = {2, 1}, .padding = {1, 0}}},
      {"pointwise 1x1", {2, 5, 4, 3}, {3, 5, 1, 1}, {}},
      {"strided 1x1", {2, 4, 5, 5}, {3, 4, 1, 1}, {.stride = 2}},
      {"no bias", {2, 3, 5, 6}, {2, 3, 3, 3}, {.padding = {0, 1}}, false},
      {"kernel as large as the padded input", {1, 2, 3, 3}, {2, 2, 5, 5}, {.padding = 1}},
  };
}

TEST(Conv2d, ForwardMatchesNaiveLoopsForEveryOption) {
  uint64_t seed = test_seed();
  for (const Case& c : cases()) {
    for (DType dtype : {kFloat64, kFloat32}) {
      Tensor x = random_input(c.x, ++seed, dtype);
      Tensor w = random_input(c.w, ++seed, dtype);
      Tensor b = c.bias ? random_input({c.w[0]}, ++seed, dtype) : Tensor();
      Tensor y = conv2d(x, w, b, c.options);
      EXPECT_EQ(y.dtype(), dtype) << c.name;
      EXPECT_TRUE(y.is_contiguous()) << c.name;
      const double tol = dtype == kFloat64 ? 1e-12 : 1e-5;
      EXPECT_TRUE(all_close(y, naive_conv2d(x, w, b, c.options), tol, tol))
          << c.name << " " << dtype_name(dtype);
    }
  }
}

TEST(Conv2d, GradientsMatchFiniteDifferencesForEveryOption) {
  uint64_t seed = test_seed();
  for (const Case& c : cases()) {
    Tensor x = random_input(c.x, ++seed, kFloat64, true);
    Tensor w = random_input(c.w, ++seed, kFloat64, true);
    TensorList inputs{x, w};
    if (c.bias) inputs.push_back(random_input({c.w[0]}, ++seed, kFloat64, true));
    const Conv2dOptions o = c.options;
    auto fn = [o](const TensorList& in) { return conv2d(in[0], in[1], in.size() > 2 ? in[2] : Tensor(), o); };
    GradcheckResult r = gradcheck(fn, inputs);
    EXPECT_TRUE(r.ok) << c.name << ": " << r.message;
  }
}

TEST(Conv2d, ChannelsLastInputGivesChannelsLastOutputAndGradients) {
  uint64_t seed = test_seed();
  Tensor base = random_input({2, 6, 5, 4}, ++seed);  // (N, H, W, C) storage
  Tensor x = base.permute({0, 3, 1, 2});             // (2, 4, 6, 5) channels_last
  Tensor w = random_input({6, 2, 3, 3}, ++seed);
  Tensor b = random_input({6}, ++seed);
  const Conv2dOptions o{.stride = {1, 2}, .padding = 1, .groups = 2};
  Tensor y = conv2d(x, w, b, o);
  EXPECT_EQ(y.suggest_memory_format(), MemoryFormat::ChannelsLast);
  EXPECT_TRUE(all_close(y, naive_conv2d(x, w, b, o), 1e-12, 1e-12));

  Tensor xg = x.detach().requires_grad_(true);
  Tensor wg = w.detach().requires_grad_(true);
  GradcheckResult r = gradcheck([o](const TensorList& in) { return conv2d(in[0], in[1], {}, o); }, {xg, wg});
  EXPECT_TRUE(r.ok) << r.message;
  conv2d(xg, wg, {}, o).sum().backward();
  EXPECT_EQ(xg.grad().suggest_memory_format(), MemoryFormat::ChannelsLast);
}

TEST(Conv2d, StridedInputsAreReadAsTheyAre) {
  uint64_t seed = test_seed();
  Tensor big = random_input({2, 6, 9, 8}, ++seed);
  Tensor x = big.slice(1, 0, 6, 2).slice(2, 1, 9, 1).narrow(3, 1, 6);  // (2, 3, 8, 6), strided
  Tensor w = random_input({4, 3, 3, 3}, ++seed).transpose(2, 3);       // a transposed kernel view
  const Conv2dOptions o{.padding = 1};
  EXPECT_TRUE(all_close(conv2d(x, w, {}, o), naive_conv2d(x, w, {}, o), 1e-12, 1e-12));
  Tensor xg = x.detach().requires_grad_(true);
  Tensor wg = w.detach().requires_grad_(true);
  GradcheckResult r = gradcheck([o](const TensorList& in) { return conv2d(in[0], in[1], {}, o); }, {xg, wg});
  EXPECT_TRUE(r.ok) << r.message;
}

TEST(Conv2d, ReducedPrecisionComputesInFloat32AndKeepsItsDtype) {
  uint64_t seed = test_seed();
  for (DType dtype : {kFloat16, kBFloat16}) {
    Tensor x = random_input({2, 4, 6, 6}, ++seed, dtype);
    Tensor w = random_input({4, 2, 3, 3}, ++seed, dtype);
    Tensor b = random_input({4}, ++seed, dtype);
    const Conv2dOptions o{.padding = 1, .groups = 2};
    Tensor y = conv2d(x, w, b, o);
    EXPECT_EQ(y.dtype(), dtype);
    // The reference sees the same (rounded) inputs; the result is rounded once.
    const double tol = dtype == kFloat16 ? 2e-3 : 1e-2;
    EXPECT_TRUE(all_close(y, naive_conv2d(x, w, b, o), tol, tol)) << dtype_name(dtype);

    Tensor xg = x.detach().requires_grad_(true), wg = w.detach().requires_grad_(true);
    Tensor bg = b.detach().requires_grad_(true);
    conv2d(xg, wg, bg, o).sum().backward();
    EXPECT_EQ(xg.grad().dtype(), dtype);
    EXPECT_EQ(wg.grad().dtype(), dtype);
    EXPECT_EQ(bg.grad().dtype(), dtype);
    // Against the float64 gradients of the same rounded values.
    Tensor x64 = x.to(kFloat64).requires_grad_(true), w64 = w.to(kFloat64).requires_grad_(true);
    conv2d(x64, w64, b.to(kFloat64), o).sum().backward();
    EXPECT_TRUE(all_close(xg.grad(), x64.grad(), tol, tol)) << dtype_name(dtype);
    EXPECT_TRUE(all_close(wg.grad(), w64.grad(), tol, 4 * tol)) << dtype_name(dtype);
  }
}

TEST(Conv2d, BackwardComputesOnlyTheGradientsThatAreNeeded) {
  uint64_t seed = test_seed();
  Tensor x = random_input({2, 3, 5, 5}, ++seed);
  Tensor w = random_input({4, 3, 3, 3}, ++seed, kFloat64, true);
  Tensor b = random_input({4}, ++seed, kFloat64, true);
  Tensor y = conv2d(x, w, b, {.padding = 1});
  Tensor g = random_input(y.sizes(), ++seed);
  y.backward(g);
  EXPECT_FALSE(x.grad().defined());
  EXPECT_TRUE(all_close(b.grad(), g.sum({0, 2, 3}), 1e-12, 1e-12));
  EXPECT_EQ(w.grad().sizes(), w.sizes());
}

TEST(Conv2d, EmptyBatchGivesEmptyOutputAndZeroWeightGradient) {
  Tensor x = zeros({0, 3, 5, 5}, {.dtype = kFloat64});
  Tensor w = random_input({4, 3, 3, 3}, test_seed(), kFloat64, true);
  Tensor y = conv2d(x, w, {}, {.padding = 1});
  EXPECT_EQ(y.sizes(), (Shape{0, 4, 5, 5}));
  y.sum().backward();
  EXPECT_TRUE(all_close(w.grad(), zeros({4, 3, 3, 3}, {.dtype = kFloat64})));
}

TEST(Conv2d, DoubleBackwardIsRefusedClearly) {
  uint64_t seed = test_seed();
  Tensor x = random_input({1, 2, 4, 4}, ++seed, kFloat64, true);
  Tensor w = random_input({2, 2, 3, 3}, ++seed, kFloat64, true);
  Tensor y = conv2d(x, w).sum();
  y.backward({}, /*retain_graph=*/false, /*create_graph=*/true);
  EXPECT_NABLA_ERROR(x.grad().sum().backward(), "double backward through conv2d is not supported");
}

TEST(Conv2d, BadArgumentsGiveClearErrors) {
  uint64_t seed = test_seed();
  Tensor x = random_input({2, 4, 6, 6}, ++seed);
  Tensor w = random_input({3, 4, 3, 3}, ++seed);
  EXPECT_NABLA_ERROR(conv2d(x, random_input({3, 3, 3, 3}, ++seed)), "conv2d", "has 4 channels",
                     "[3, 3, 3, 3]", "expects 3");
  EXPECT_NABLA_ERROR(conv2d(x, random_input({3, 4, 3, 3}, ++seed), {}, {.groups = 3}), "conv2d",
                     "groups=3 does not divide the 4 channels");
  EXPECT_NABLA_ERROR(conv2d(x, random_input({3, 2, 3, 3}, ++seed), {}, {.groups = 2}),
                     "groups=2 does not divide the 3 output channels");
  EXPECT_NABLA_ERROR(conv2d(x, w, {}, {.groups = 0}), "groups must be positive");
  EXPECT_NABLA_ERROR(conv2d(x, w, {}, {.stride = {1, 0}}), "stride must be positive", "(1, 0)");
  EXPECT_NABLA_ERROR(conv2d(x, w, {}, {.padding = -1}), "padding must be non-negative");
  EXPECT_NABLA_ERROR(conv2d(x, w, {}, {.dilation = 0}), "dilation must be positive");
  EXPECT_NABLA_ERROR(conv2d(x, random_input({3, 4, 7, 3}, ++seed)), "conv2d", "too small", "[2, 4, 6, 6]",
                     "padded input is 6 x 6", "kernel is 7 x 3");
  EXPECT_NABLA_ERROR(conv2d(x, w, {}, {.dilation = 3}), "too small", "kernel is 7 x 7");
  EXPECT_NABLA_ERROR(conv2d(x.select(0, 0), w), "expected a 4-d input (N, C, H, W)");
  EXPECT_NABLA_ERROR(conv2d(x, w.select(0, 0)), "expected a 4-d weight");
  EXPECT_NABLA_ERROR(conv2d(x, w.to(kFloat32)), "must have one dtype", "float32");
  EXPECT_NABLA_ERROR(conv2d(x.to(kInt64), w.to(kInt64)), "floating-point input");
  EXPECT_NABLA_ERROR(conv2d(x, w, random_input({4}, ++seed)), "expected a bias of shape [3]");
  EXPECT_NABLA_ERROR(conv2d(x, w, random_input({3}, ++seed, kFloat32)), "bias", "dtype");
  EXPECT_NABLA_ERROR(conv2d(x, Tensor()), "undefined");
}

}  // namespace
}  // namespace nabla
