// CUDA softmax and log_softmax against the CPU backend (in float64), for every floating dtype, along the
// contiguous last dim (sub-warp, warp and block rows) and along strided dims (the column
// kernel), on transposed, channels_last and copied (strided) inputs, with large logits, NaN
// rows and gradients.
#include <limits>

#include "parity_util.h"

namespace nabla {
namespace {

using namespace testing;  // NOLINT: test helpers

struct Case {
  const char* name;
  Shape storage;
  std::function<Tensor(const Tensor&)> view;
  int64_t dim;
};

Tensor same(const Tensor& t) {
  return t;
}

// Against a float64 reference. log_softmax is x - logsumexp, which cancels: its absolute
// error is that of logsumexp (a few ulps of values around 1 to 10).
Tolerance softmax_tolerance(DType dtype, bool log) {
  switch (dtype) {
    case kFloat64:
      return {1e-12, 1e-13};
    case kFloat32:
      return {1e-5, log ? 1e-5 : 1e-7};
    default:
      return {1e-2, 1e-3};
  }
}

// The CPU result in float64 (the CPU keeps float32 sums in float32, sequentially, which for
// long rows is the less accurate of the two), rounded to the input's dtype.
Tensor reference(const Tensor& x, int64_t dim, bool log) {
  Tensor x64 = x.to(kFloat64);
  return (log ? log_softmax(x64, dim) : softmax(x64, dim)).to(x.dtype());
}

TEST(CudaParitySoftmax, SoftmaxAndLogSoftmaxMatchTheCpuOnEveryKernelPath) {
  SKIP_WITHOUT_GPU();
  const std::vector<Case> cases = {
      {"short rows (sub-warp)", {500, 10}, same, 1},
      {"rows (a warp each)", {300, 1000}, same, -1},
      {"long rows (a block each)", {20, 5000}, same, 1},
      {"a single long row (split over blocks)", {1, 70000}, same, 1},
      {"few long rows (split over blocks)", {3, 20000}, same, -1},
      {"narrow columns", {64, 37, 5}, same, 1},
      {"long columns (split over blocks)", {30000, 3}, same, 0},
      {"wide columns", {1000, 70}, same, 0},
      {"channels_last over C",
       {4, 6, 6, 8},
       [](const Tensor& t) {
         return t.permute({0, 3, 1, 2});
       },
       1},
      {"channels_last over W",
       {4, 6, 6, 8},
       [](const Tensor& t) {
         return t.permute({0, 3, 1, 2});
       },
       3},
      {"transposed", {50, 40}, [](const Tensor& t) { return t.t(); }, 0},
      {"strided (copied)", {30, 80}, [](const Tensor& t) { return t.slice(1, 0, 80, 2); }, 1},
      {"size-1 dim", {5, 1}, same, 1},
  };
  uint64_t seed = test_seed();
  for (const Case& c : cases) {
    Tensor base = random_input(c.storage, ++seed) * 3.0;
    for (DType dtype : kFloatDTypes) {
      Tensor host = base.to(dtype);
      Tensor x = c.view(host), xd = c.view(to_cuda(host));
      Tensor y = softmax(xd, c.dim);
      EXPECT_TRUE(matches_cpu(y, reference(x, c.dim, false), softmax_tolerance(dtype, false)))
          << context("softmax", dtype, c.name);
      EXPECT_TRUE(
          matches_cpu(log_softmax(xd, c.dim), reference(x, c.dim, true), softmax_tolerance(dtype, true)))
          << context("log_softmax", dtype, c.name);
      // A dense input's output keeps its layout.
      if (x.is_contiguous(MemoryFormat::ChannelsLast) && !x.is_contiguous()) {
        EXPECT_TRUE(y.is_contiguous(MemoryFormat::ChannelsLast)) << c.name;
      }
    }
  }
}

TEST(CudaParitySoftmax, LargeLogitsStayFiniteAndNaNRowsStayNaN) {
  SKIP_WITHOUT_GPU();
  std::vector<double> v = (random_input({40, 300}, test_seed()) * 1000.0).to_vector<double>();
  v[7 * 300 + 123] = std::numeric_limits<double>::quiet_NaN();  // row 7 and column 123
  v[9 * 300 + 4] = -std::numeric_limits<double>::infinity();    // -inf just contributes zero
  Tensor base = tensor<double>(v, {40, 300});
  for (DType dtype : {kFloat32, kFloat64}) {
    Tensor x = base.to(dtype), xd = to_cuda(x);
    for (int64_t dim : {0, 1}) {
      EXPECT_TRUE(matches_cpu(softmax(xd, dim), reference(x, dim, false), softmax_tolerance(dtype, false)))
          << context("softmax", dtype) << " dim " << dim;
      EXPECT_TRUE(matches_cpu(log_softmax(xd, dim), log_softmax(x, dim), softmax_tolerance(dtype, true)))
          << context("log_softmax", dtype) << " dim " << dim;
    }
  }
}

TEST(CudaParitySoftmax, GradientsMatchTheCpu) {
  SKIP_WITHOUT_GPU();
  uint64_t seed = test_seed();
  for (DType dtype : {kFloat32, kFloat64}) {
    for (bool log : {false, true}) {
      for (int64_t dim : {0, 1, 2}) {
        Tensor base = random_input({6, 50, 7}, ++seed, dtype);
        Tensor x = base.detach().requires_grad_(true);
        Tensor xd = to_cuda(base).requires_grad_(true);
        Tensor g = random_input({6, 50, 7}, ++seed, dtype);
        (log ? log_softmax(x, dim) : softmax(x, dim)).backward(g);
        (log ? log_softmax(xd, dim) : softmax(xd, dim)).backward(to_cuda(g));
        const Tolerance tol = dtype == kFloat32 ? Tolerance{1e-5, 1e-6} : Tolerance{1e-11, 1e-12};
        EXPECT_TRUE(matches_cpu(xd.grad(), x.grad(), tol))
            << context(log ? "log_softmax grad" : "softmax grad", dtype) << " dim " << dim;
      }
    }
  }
}

}  // namespace
}  // namespace nabla
