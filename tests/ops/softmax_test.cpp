// softmax and log_softmax: values against a plain-loop reference along every dim and layout,
// stability on large logits, reduced-precision dtypes, gradients by finite differences, errors.
#include <cmath>
#include <functional>
#include <limits>
#include <string>

#include "test_util.h"

namespace nabla {
namespace {

using testing::all_close;
using testing::random_input;

constexpr double kInf = std::numeric_limits<double>::infinity();

// exp(x - max) / sum(exp(x - max)) along `dim`, or its log, by loops over row-major values.
Tensor reference_softmax(const Tensor& x, int64_t dim, bool log) {
  const int64_t nd = x.dim();
  dim = dim < 0 ? dim + nd : dim;
  const int64_t size = x.size(dim);
  int64_t inner = 1;
  for (int64_t d = dim + 1; d < nd; ++d) inner *= x.size(d);
  const int64_t outer = x.numel() / (size * inner);
  std::vector<double> v = x.to(kFloat64).to_vector<double>(), out(v.size());
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < inner; ++i) {
      auto at = [&](int64_t r) { return o * size * inner + r * inner + i; };
      double m = -kInf;
      for (int64_t r = 0; r < size; ++r) m = std::max(m, v[at(r)]);
      double s = 0;
      for (int64_t r = 0; r < size; ++r) s += std::exp(v[at(r)] - m);
      for (int64_t r = 0; r < size; ++r)
        out[at(r)] = log ? v[at(r)] - m - std::log(s) : std::exp(v[at(r)] - m) / s;
    }
  }
  return tensor<double>(out, x.sizes());
}

Tensor apply(const Tensor& x, int64_t dim, bool log) {
  return log ? log_softmax(x, dim) : softmax(x, dim);
}

std::vector<std::pair<std::string, Tensor>> layouts(uint64_t seed, DType dtype) {
  return {
      {"contiguous", random_input({2, 3, 4, 5}, seed, dtype)},
      {"transposed", random_input({2, 4, 3, 5}, seed + 1, dtype).transpose(1, 2)},
      {"channels_last", random_input({2, 3, 4, 5}, seed + 2, dtype).contiguous(MemoryFormat::ChannelsLast)},
      {"strided slice", random_input({2, 6, 4, 5}, seed + 3, dtype).slice(1, 0, 6, 2)},
  };
}

TEST(Softmax, MatchesLoopReferenceAlongEveryDimAndLayout) {
  uint64_t seed = testing::test_seed();
  for (DType dtype : {kFloat64, kFloat32}) {
    const double tol = dtype == kFloat64 ? 1e-13 : 1e-6;
    for (const auto& [layout, x] : layouts(seed += 10, dtype)) {
      for (int64_t dim : {0, 1, 2, 3, -1, -3}) {
        for (bool log : {false, true}) {
          Tensor y = apply(x, dim, log);
          EXPECT_EQ(y.dtype(), dtype);
          EXPECT_TRUE(all_close(y, reference_softmax(x, dim, log), tol, tol))
              << dtype_name(dtype) << " " << layout << " dim " << dim << " log " << log;
        }
      }
    }
  }
}

TEST(Softmax, RowsSumToOneAndChannelsLastStaysChannelsLast) {
  Tensor x =
      random_input({2, 7, 3, 3}, testing::test_seed(), kFloat32).contiguous(MemoryFormat::ChannelsLast);
  Tensor y = softmax(x, 1);
  EXPECT_TRUE(y.is_contiguous(MemoryFormat::ChannelsLast));
  EXPECT_TRUE(all_close(sum(y, {1}), ones({2, 3, 3}), 1e-6, 1e-6));
}

TEST(Softmax, LargeInputsMatchReferenceOnEveryParallelSplit) {
  // Past the parallel threshold, with rows along the last dim and along dim 0 (a wide inner).
  Tensor x = random_input({300, 700}, testing::test_seed(), kFloat32);
  for (int64_t dim : {0, 1}) {
    for (bool log : {false, true}) {
      EXPECT_TRUE(all_close(apply(x, dim, log), reference_softmax(x, dim, log), 1e-5, 1e-6))
          << "dim " << dim << " log " << log;
    }
  }
}

TEST(Softmax, LargeLogitsStayFinite) {
  // exp(2000) overflows every float type; subtracting the row max keeps the result exact.
  Tensor x = random_input({4, 6}, testing::test_seed()) * 1000.0;
  for (bool log : {false, true}) {
    Tensor y = apply(x, 1, log);
    for (double v : y.to_vector<double>()) EXPECT_TRUE(std::isfinite(v));
    EXPECT_TRUE(all_close(y, reference_softmax(x, 1, log), 1e-12, 1e-12)) << "log " << log;
  }
}

TEST(Softmax, NegativeInfinityGetsZeroProbabilityAndNanSpreadsOverItsRow) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  Tensor x = tensor<double>({-kInf, 1, 2, 0.5, nan, 1}, {2, 3});
  std::vector<double> y = softmax(x, 1).to_vector<double>();
  EXPECT_EQ(y[0], 0.0);
  EXPECT_NEAR(y[1] + y[2], 1.0, 1e-15);
  for (int i = 3; i < 6; ++i) EXPECT_TRUE(std::isnan(y[i]));
  EXPECT_EQ(log_softmax(x, 1).to_vector<double>()[0], -kInf);
}

TEST(Softmax, HalfAndBFloat16ComputeInFloatAndKeepTheirDtype) {
  for (DType dtype : {kFloat16, kBFloat16}) {
    const double tol = dtype == kFloat16 ? 2e-3 : 1e-2;
    for (const auto& [layout, x] : layouts(testing::test_seed(), dtype)) {
      for (bool log : {false, true}) {
        Tensor y = apply(x, 1, log);
        EXPECT_EQ(y.dtype(), dtype);
        // The reference uses the same rounded inputs, so only the output rounding differs.
        EXPECT_TRUE(all_close(y, reference_softmax(x, 1, log), tol, tol))
            << dtype_name(dtype) << " " << layout << " log " << log;
      }
    }
  }
}

TEST(SoftmaxGrad, SoftmaxAndLogSoftmaxPassFiniteDifferenceCheck) {
  const uint64_t seed = testing::test_seed();
  std::vector<std::pair<std::string, Tensor>> inputs = {
      {"contiguous", random_input({2, 3, 2, 3}, seed, kFloat64)},
      {"transposed", random_input({2, 2, 3, 3}, seed + 1, kFloat64).transpose(1, 2)},
      {"channels_last",
       random_input({2, 3, 2, 3}, seed + 2, kFloat64).contiguous(MemoryFormat::ChannelsLast)},
  };
  for (auto& [layout, x] : inputs) {
    x.requires_grad_(true);
    for (int64_t dim : {0, 1, -1}) {
      for (bool log : {false, true}) {
        auto result =
            gradcheck([&](const TensorList& in) { return apply(in[0], dim, log); }, {x}, {.seed = seed});
        EXPECT_TRUE(result) << layout << " dim " << dim << " log " << log << ": " << result.message;
      }
    }
  }
}

TEST(Softmax, ErrorsNameTheOpAndWhatWasExpected) {
  Tensor ints = randint(0, 5, {2, 3});
  EXPECT_NABLA_ERROR(softmax(ints, 1), "softmax", "floating-point", "int64[2, 3]");
  EXPECT_NABLA_ERROR(log_softmax(ints, 0), "log_softmax", "floating-point");
  Tensor x = random_input({2, 3}, testing::test_seed());
  EXPECT_NABLA_ERROR(softmax(x, 2), "softmax", "dim 2", "out of range");
  EXPECT_NABLA_ERROR(log_softmax(x, -3), "log_softmax", "dim -3", "out of range");
}

}  // namespace
}  // namespace nabla
