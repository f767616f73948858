// CUDA reductions against the CPU backend: sum, mean, var, norm, max/min with indices,
// argmax/argmin and sum_to, for every dtype each supports. Shapes are chosen to reach every
// kernel path of ops/cuda/reduce/launch.cuh (sub-warp, warp and block rows, long rows split
// over blocks, narrow and wide columns, full reductions past a million elements, per-channel
// statistics of NCHW and channels_last tensors); layouts are read in place (transposed,
// channels_last, two reduced runs) or copied first (strided, expanded, interleaved reduced
// dims). Gradients through each op are compared too.
//
// The CPU accumulates float32 in double, CUDA in float: float32 sums get an absolute tolerance
// that grows like sqrt(R), the size of their rounding error.
#include <cmath>
#include <limits>

#include "parity_util.h"

namespace nabla {
namespace {

using namespace testing;  // NOLINT: test helpers

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

struct Case {
  const char* name;
  Shape storage;
  std::function<Tensor(const Tensor&)> view;
  Shape dims;
};

Tensor same(const Tensor& t) {
  return t;
}

std::vector<Case> reduction_cases() {
  return {
      {"short rows (sub-warp)", {1000, 5}, same, {1}},
      {"rows (a warp each)", {64, 300}, same, {-1}},
      {"few long rows (split over blocks)", {3, 50000}, same, {1}},
      {"many long rows (a block each)", {700, 3000}, same, {1}},
      {"full, over a million", {1100, 1000}, same, {}},
      {"full 1-d, odd length", {2097159}, same, {}},
      {"narrow columns (split)", {100000, 3}, same, {0}},
      {"columns", {5000, 40}, same, {0}},
      {"middle dim", {7, 30, 200}, same, {1}},
      {"NCHW per channel", {8, 16, 14, 14}, same, {0, 2, 3}},
      {"NCHW per channel, large", {32, 64, 28, 28}, same, {0, 2, 3}},
      {"two reduced runs, short segments (walker)", {300, 8, 5}, same, {0, 2}},
      {"channels_last per channel",
       {8, 14, 14, 16},
       [](const Tensor& t) {
         return t.permute({0, 3, 1, 2});
       },
       {0, 2, 3}},
      {"transposed, over rows", {200, 300}, [](const Tensor& t) { return t.t(); }, {0}},
      {"transposed, over columns", {200, 300}, [](const Tensor& t) { return t.t(); }, {1}},
      {"strided (copied)", {40, 60}, [](const Tensor& t) { return t.slice(1, 0, 60, 2); }, {1}},
      {"expanded (copied)",
       {1, 50},
       [](const Tensor& t) {
         return t.expand({30, 50});
       },
       {0}},
      {"interleaved reduced dims (copied)", {4, 5, 6, 7}, same, {1, 3}},
      {"two reduced runs", {4, 5, 6, 7}, same, {0, 2}},
      {"every dim listed", {3, 4, 5}, same, {0, 1, 2}},
      {"negative dims", {6, 7, 8}, same, {-1, -3}},
  };
}

int64_t reduced_count(const Tensor& x, const Shape& dims) {
  if (dims.empty()) return x.numel();
  int64_t n = 1;
  for (int64_t d : dims) n *= x.size(d < 0 ? d + x.dim() : d);
  return n;
}

// `magnitude`: the size of the result relative to one element (sqrt(R) for a sum of R signed
// values, 1 / sqrt(R) for their mean), which scales the absolute tolerance.
Tolerance reduce_tolerance(DType dtype, double magnitude = 1.0) {
  if (!is_floating(dtype)) return {0, 0};
  const double base = dtype == kFloat64 ? 1e-12 : dtype == kFloat32 ? 1e-5 : 1e-2;
  return {base, base * magnitude};
}

TEST(CudaParityReduce, SumMeanVarAndNormMatchTheCpuOnEveryKernelPath) {
  SKIP_WITHOUT_GPU();
  uint64_t seed = test_seed();
  for (const Case& c : reduction_cases()) {
    Tensor base = random_input(c.storage, ++seed);
    for (DType dtype : kFloatDTypes) {
      Tensor host = base.to(dtype);
      Tensor x = c.view(host), xd = c.view(to_cuda(host));
      const double r = static_cast<double>(reduced_count(x, c.dims));
      for (bool keepdim : {false, true}) {
        const std::string what = context(c.name, dtype) + (keepdim ? " keepdim" : "");
        EXPECT_TRUE(matches_cpu(sum(xd, c.dims, keepdim), sum(x, c.dims, keepdim),
                                reduce_tolerance(dtype, std::sqrt(r))))
            << "sum " << what;
        EXPECT_TRUE(matches_cpu(mean(xd, c.dims, keepdim), mean(x, c.dims, keepdim),
                                reduce_tolerance(dtype, 1.0 / std::sqrt(r))))
            << "mean " << what;
        EXPECT_TRUE(
            matches_cpu(var(xd, c.dims, 1, keepdim), var(x, c.dims, 1, keepdim), reduce_tolerance(dtype)))
            << "var " << what;
        EXPECT_TRUE(matches_cpu(norm(xd, 2.0, c.dims, keepdim), norm(x, 2.0, c.dims, keepdim),
                                reduce_tolerance(dtype)))
            << "norm " << what;
      }
    }
  }
}

TEST(CudaParityReduce, NormsOfEveryOrderMatchTheCpu) {
  SKIP_WITHOUT_GPU();
  uint64_t seed = test_seed();
  const std::vector<Case> cases = {
      {"rows", {300, 77}, same, {1}},
      {"columns", {777, 20}, same, {0}},
      {"full", {600, 1000}, same, {}},
  };
  for (const Case& c : cases) {
    Tensor base = random_input(c.storage, ++seed);
    for (DType dtype : kFloatDTypes) {
      Tensor x = base.to(dtype), xd = to_cuda(x);
      for (double p : {0.0, 1.0, 2.0, 3.0, 0.5, kInf, -kInf}) {
        // General p goes through pow in each backend's libm: a few ulps apart.
        Tolerance tol = reduce_tolerance(dtype);
        if (dtype == kFloat64 && p != std::floor(p)) tol = {1e-10, 1e-10};
        EXPECT_TRUE(matches_cpu(norm(xd, p, c.dims), norm(x, p, c.dims), tol))
            << "p=" << p << " " << context(c.name, dtype);
      }
    }
  }
}

TEST(CudaParityReduce, IntegerAndBoolSumsAreExactInt64) {
  SKIP_WITHOUT_GPU();
  uint64_t seed = test_seed();
  const std::vector<Case> cases = {
      {"rows", {300, 77}, same, {1}},
      {"columns", {777, 20}, same, {0}},
      {"full", {1500, 1000}, same, {}},
      {"NCHW per channel", {8, 16, 14, 14}, same, {0, 2, 3}},
  };
  for (const Case& c : cases) {
    for (DType dtype : {kInt64, kInt32, kUInt8, kBool}) {
      Tensor x = random_values(c.storage, ++seed, dtype), xd = to_cuda(x);
      Tensor got = sum(xd, c.dims);
      EXPECT_EQ(got.dtype(), kInt64);
      EXPECT_TRUE(matches_cpu(got, sum(x, c.dims))) << context(c.name, dtype);
    }
  }
}

// Values and int64 indices are exact: the kernels pick the same element (the first on ties;
// the integer and 16-bit inputs here have many ties).
TEST(CudaParityReduce, MaxMinAndTheirIndicesMatchTheCpuInEveryDtype) {
  SKIP_WITHOUT_GPU();
  uint64_t seed = test_seed();
  const std::vector<Case> cases = {
      {"short rows", {500, 6}, same, {1}},
      {"rows", {64, 300}, same, {1}},
      {"few long rows (split)", {2, 70000}, same, {-1}},
      {"columns", {3000, 33}, same, {0}},
      {"middle dim", {5, 400, 9}, same, {1}},
      {"transposed", {40, 300}, [](const Tensor& t) { return t.t(); }, {1}},
      {"channels_last over C",
       {4, 5, 6, 7},
       [](const Tensor& t) {
         return t.permute({0, 3, 1, 2});
       },
       {1}},
      {"strided (copied)", {40, 60}, [](const Tensor& t) { return t.slice(1, 0, 60, 3); }, {0}},
  };
  for (const Case& c : cases) {
    for (DType dtype : kAllDTypes) {
      Tensor base = random_values(c.storage, ++seed, dtype);
      Tensor x = c.view(base), xd = c.view(to_cuda(base));
      const int64_t dim = c.dims[0];
      const std::string what = context(c.name, dtype);
      for (bool keepdim : {false, true}) {
        auto [values, indices] = max(x, dim, keepdim);
        auto [values_d, indices_d] = max(xd, dim, keepdim);
        EXPECT_TRUE(matches_cpu(values_d, values, Tolerance{0, 0})) << "max " << what;
        EXPECT_TRUE(matches_cpu(indices_d, indices)) << "max indices " << what;
        auto [low, low_indices] = min(x, dim, keepdim);
        auto [low_d, low_indices_d] = min(xd, dim, keepdim);
        EXPECT_TRUE(matches_cpu(low_d, low, Tolerance{0, 0})) << "min " << what;
        EXPECT_TRUE(matches_cpu(low_indices_d, low_indices)) << "min indices " << what;
      }
      EXPECT_TRUE(matches_cpu(argmax(xd, dim), argmax(x, dim))) << "argmax " << what;
      EXPECT_TRUE(matches_cpu(argmin(xd, dim, true), argmin(x, dim, true))) << "argmin " << what;
      EXPECT_TRUE(matches_cpu(argmax(xd), argmax(x))) << "argmax of all " << what;
      EXPECT_TRUE(matches_cpu(max(xd), max(x), Tolerance{0, 0})) << "max of all " << what;
      EXPECT_TRUE(matches_cpu(min(xd), min(x), Tolerance{0, 0})) << "min of all " << what;
    }
  }
}

TEST(CudaParityReduce, NaNPropagatesThroughMaxMinSumAndNormLikeTheCpu) {
  SKIP_WITHOUT_GPU();
  Tensor x = random_input({64, 700}, test_seed());
  std::vector<double> v = x.to_vector<double>();
  // Rows 3, 10 and 40 hold NaNs (row 10 two of them, so the first must win); column 5 too.
  for (int64_t k : {3 * 700 + 17, 10 * 700 + 650, 10 * 700 + 2, 40 * 700 + 699, 20 * 700 + 5}) v[k] = kNaN;
  for (DType dtype : kFloatDTypes) {
    Tensor host = tensor<double>(v, {64, 700}).to(dtype), dev = to_cuda(host);
    for (int64_t dim : {0, 1}) {
      auto [values, indices] = max(host, dim);
      auto [values_d, indices_d] = max(dev, dim);
      EXPECT_TRUE(matches_cpu(values_d, values, Tolerance{0, 0})) << context("max", dtype);
      EXPECT_TRUE(matches_cpu(indices_d, indices)) << context("max indices", dtype);
      auto [low, low_indices] = min(host, dim);
      auto [low_d, low_indices_d] = min(dev, dim);
      EXPECT_TRUE(matches_cpu(low_indices_d, low_indices)) << context("min indices", dtype);
      EXPECT_TRUE(matches_cpu(sum(dev, {dim}), sum(host, {dim}), reduce_tolerance(dtype, 30.0)))
          << context("sum", dtype);
      EXPECT_TRUE(matches_cpu(norm(dev, kInf, {dim}), norm(host, kInf, {dim}), Tolerance{0, 0}))
          << context("inf norm", dtype);
    }
    EXPECT_TRUE(std::isnan(max(dev).item<double>()));
    EXPECT_EQ(argmax(dev).item<int64_t>(), 3 * 700 + 17);
  }
}

TEST(CudaParityReduce, EmptyInputsGiveTheIdentityAndEmptyOutputsNothing) {
  SKIP_WITHOUT_GPU();
  Tensor x = Tensor::empty({0, 4}), xd = to_cuda(x);
  EXPECT_TRUE(matches_cpu(sum(xd, {0}), sum(x, {0})));
  EXPECT_TRUE(matches_cpu(mean(xd, {0}), mean(x, {0})));  // NaN
  EXPECT_TRUE(matches_cpu(var(xd, {0}), var(x, {0})));
  EXPECT_TRUE(matches_cpu(norm(xd, 2.0, {0}), norm(x, 2.0, {0})));
  EXPECT_EQ(sum(xd, {1}).sizes(), Shape{0});
  EXPECT_EQ(max(xd, 1, false).first.sizes(), Shape{0});
  EXPECT_NABLA_ERROR(max(xd), "non-empty");
}

TEST(CudaParityReduce, VarHandlesCorrectionAndLargeOffsets) {
  SKIP_WITHOUT_GPU();
  // Values around 1000 with spread ~1: sum(x^2) - sum(x)^2 / n would cancel; Welford does not.
  Tensor x = random_input({50, 4000}, test_seed()) + 1000.0;
  for (DType dtype : {kFloat32, kFloat64}) {
    Tensor host = x.to(dtype), dev = to_cuda(host);
    const Tolerance tol = dtype == kFloat32 ? Tolerance{2e-4, 2e-4} : Tolerance{1e-10, 1e-10};
    for (int64_t correction : {0, 1, 7}) {
      EXPECT_TRUE(matches_cpu(var(dev, {1}, correction), var(host, {1}, correction), tol))
          << context("var rows", dtype) << " correction " << correction;
      EXPECT_TRUE(matches_cpu(var(dev, {0}, correction), var(host, {0}, correction), tol))
          << context("var columns", dtype) << " correction " << correction;
      EXPECT_TRUE(matches_cpu(var(dev, {}, correction), var(host, {}, correction), tol))
          << context("var of all", dtype) << " correction " << correction;
    }
    // N - correction <= 0: inf, or NaN for a single element, as on the CPU.
    EXPECT_TRUE(matches_cpu(var(dev.narrow(1, 0, 3), {1}, 3), var(host.narrow(1, 0, 3), {1}, 3)));
    EXPECT_TRUE(matches_cpu(var(dev.narrow(1, 0, 1), {1}), var(host.narrow(1, 0, 1), {1})));
  }
}

TEST(CudaParityReduce, SumToFoldsBroadcastDimsLikeTheCpu) {
  SKIP_WITHOUT_GPU();
  uint64_t seed = test_seed();
  for (DType dtype : kFloatDTypes) {
    Tensor x = random_input({8, 3, 5, 6}, ++seed).to(dtype), xd = to_cuda(x);
    for (const Shape& target : {Shape{3, 1, 6}, Shape{6}, Shape{1, 5, 1}, Shape{8, 3, 1, 1}, Shape{}}) {
      EXPECT_TRUE(matches_cpu(sum_to(xd, target), sum_to(x, target), reduce_tolerance(dtype, 16.0)))
          << context("sum_to", dtype) << shape_str(target);
    }
  }
}

// d(sum(op(x) * w))/dx on both devices for fresh random x and w, in float32 and float64.
void expect_same_gradient(const std::function<Tensor(const Tensor&)>& op, const Shape& sizes, uint64_t seed,
                          const std::string& what) {
  for (DType dtype : {kFloat32, kFloat64}) {
    Tensor base = random_input(sizes, seed, dtype);
    Tensor x = base.detach().requires_grad_(true);
    Tensor xd = to_cuda(base).requires_grad_(true);
    Tensor y = op(x);
    Tensor w = random_input(y.sizes(), seed + 1, dtype);
    (y * w).sum().backward();
    (op(xd) * to_cuda(w)).sum().backward();
    ASSERT_TRUE(xd.grad().defined()) << what;
    const Tolerance tol = dtype == kFloat32 ? Tolerance{1e-5, 1e-5} : Tolerance{1e-11, 1e-11};
    EXPECT_TRUE(matches_cpu(xd.grad(), x.grad(), tol)) << what << " " << dtype_name(dtype);
  }
}

TEST(CudaParityReduce, GradientsMatchTheCpu) {
  SKIP_WITHOUT_GPU();
  uint64_t seed = test_seed();
  auto channels_last = [](const Tensor& t) { return t.permute({0, 3, 1, 2}); };  // (4, 6, 5, 3) -> NCHW
  expect_same_gradient([](const Tensor& x) { return sum(x, {1}); }, {30, 40}, ++seed, "sum rows");
  expect_same_gradient(
      [&](const Tensor& x) {
        return sum(channels_last(x), {0, 2, 3}, true);
      },
      {4, 6, 5, 3}, ++seed, "sum per channel, channels_last");
  expect_same_gradient([](const Tensor& x) { return mean(x.t(), {0}); }, {30, 40}, ++seed, "mean transposed");
  expect_same_gradient([](const Tensor& x) { return var(x, {0, 2}); }, {6, 5, 7}, ++seed, "var");
  for (double p : {1.0, 2.0, 3.0, kInf}) {
    expect_same_gradient([p](const Tensor& x) { return norm(x, p, {1}); }, {20, 33}, ++seed,
                         "norm p=" + std::to_string(p));
  }
  expect_same_gradient([](const Tensor& x) { return max(x, 1, false).first; }, {20, 33}, ++seed, "max dim");
  expect_same_gradient([](const Tensor& x) { return min(x, 0, true).first; }, {20, 33}, ++seed, "min dim");
  expect_same_gradient([](const Tensor& x) { return max(x); }, {20, 33}, ++seed, "max of all");
  expect_same_gradient([](const Tensor& x) { return sum_to(x, {5, 1}); }, {4, 5, 6}, ++seed, "sum_to");
}

}  // namespace
}  // namespace nabla
