#include <cmath>
#include <limits>
#include <vector>

#include "test_util.h"

namespace nabla {
namespace {

using testing::all_close;

TEST(Factory, ZerosOnesFullFillEveryElement) {
  auto z = zeros({3, 5}, {.dtype = kFloat64});
  auto o = ones({2, 2, 2}, {.dtype = kInt32});
  auto f = full({4}, 2.5, {.dtype = kBFloat16});
  for (double v : z.to_vector<double>()) EXPECT_EQ(v, 0.0);
  for (int32_t v : o.to_vector<int32_t>()) EXPECT_EQ(v, 1);
  for (float v : f.to(kFloat32).to_vector<float>()) EXPECT_EQ(v, 2.5f);
  EXPECT_EQ(z.sizes(), (Shape{3, 5}));
}

TEST(Factory, ArangeAndLinspaceMatchClosedForms) {
  auto a = arange(2.0, 11.0, 3.0, {.dtype = kFloat64});
  EXPECT_EQ(a.to_vector<double>(), (std::vector<double>{2, 5, 8}));
  auto i = arange(5, {.dtype = kInt64});
  EXPECT_EQ(i.to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 2, 3, 4}));
  auto l = linspace(-1.0, 1.0, 5, {.dtype = kFloat64});
  EXPECT_EQ(l.to_vector<double>(), (std::vector<double>{-1, -0.5, 0, 0.5, 1}));
  EXPECT_NABLA_ERROR(arange(0.0, 1.0, 0.0), "arange", "step");
}

TEST(Factory, RandIsReproducibleFromTheSeedAndAdvancesTheGenerator) {
  Generator g1(testing::test_seed()), g2(testing::test_seed());
  auto a = rand({1000}, {.dtype = kFloat64}, &g1);
  auto b = rand({1000}, {.dtype = kFloat64}, &g2);
  EXPECT_TRUE(all_close(a, b, 0, 0));
  auto c = rand({1000}, {.dtype = kFloat64}, &g1);
  EXPECT_FALSE(all_close(a, c, 0, 0));  // a second draw gives new numbers
}

TEST(Factory, RandAndRandnHaveTheRightMoments) {
  Generator gen(testing::test_seed());
  const int n = 200000;
  auto u = rand({n}, {.dtype = kFloat64}, &gen).to_vector<double>();
  auto z = randn({n}, {.dtype = kFloat32}, &gen).to(kFloat64).to_vector<double>();
  double mu = 0, mz = 0, vz = 0, lo = 1, hi = 0;
  for (double x : u) mu += x, lo = std::min(lo, x), hi = std::max(hi, x);
  for (double x : z) mz += x;
  mu /= n, mz /= n;
  for (double x : z) vz += (x - mz) * (x - mz);
  vz /= n;
  EXPECT_NEAR(mu, 0.5, 0.005);
  EXPECT_GE(lo, 0.0);
  EXPECT_LT(hi, 1.0);
  EXPECT_NEAR(mz, 0.0, 0.01);
  EXPECT_NEAR(vz, 1.0, 0.01);
}

TEST(Factory, RandintStaysInRangeAndHitsEveryValue) {
  Generator gen(testing::test_seed());
  auto r = randint(-3, 4, {10000}, {.dtype = kInt64}, &gen).to_vector<int64_t>();
  std::vector<int> counts(7, 0);
  for (int64_t v : r) {
    ASSERT_GE(v, -3);
    ASSERT_LT(v, 4);
    ++counts[v + 3];
  }
  for (int c : counts) EXPECT_GT(c, 1200);  // 10000 / 7 = 1428 expected each
  EXPECT_NABLA_ERROR(randint(5, 5, {2}), "randint", "low < high");
}

TEST(Factory, TensorFromVectorAndFromBlobShareOrCopyAsDocumented) {
  std::vector<float> values{1, 2, 3, 4, 5, 6};
  auto t = tensor(values, {2, 3});
  values[0] = 100;  // tensor() copied
  EXPECT_EQ(t.to_vector<float>()[0], 1.0f);
  auto b = from_blob(values.data(), {3, 2});
  values[1] = -7;  // from_blob borrows
  EXPECT_EQ(b.to_vector<float>()[1], -7.0f);
  EXPECT_NABLA_ERROR(tensor<float>({1, 2, 3}, {2, 2}), "3 values do not fill shape [2, 2]");
}

TEST(Factory, EmptyRejectsNegativeSizes) {
  EXPECT_NABLA_ERROR(empty({2, -1}), "negative size", "[2, -1]");
}

// Found by checkpoint_fuzz: a float64 value of 1.5e243 copied into an int64 buffer (a BatchNorm
// counter) was an undefined conversion. Floating values now convert to integers as CUDA's
// instructions do: NaN to 0, beyond the range to the nearest bound, otherwise toward zero.
TEST(Factory, FloatToIntegerConversionsSaturateAndTakeNanToZero) {
  const double inf = std::numeric_limits<double>::infinity();
  const Tensor x = tensor<double>({std::nan(""), 1.5e243, -1e300, 3.7, -2.5, inf, -inf}, {7});
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max(), kMin = std::numeric_limits<int64_t>::min();
  EXPECT_EQ(x.to(kInt64).to_vector<int64_t>(), (std::vector<int64_t>{0, kMax, kMin, 3, -2, kMax, kMin}));
  EXPECT_EQ(x.to(kInt32).to(kInt64).to_vector<int64_t>(),
            (std::vector<int64_t>{0, INT32_MAX, INT32_MIN, 3, -2, INT32_MAX, INT32_MIN}));
  EXPECT_EQ(x.to(kUInt8).to(kInt64).to_vector<int64_t>(), (std::vector<int64_t>{0, 255, 0, 3, 0, 255, 0}));
  EXPECT_EQ(x.to(kFloat16).to(kInt32).to(kInt64).to_vector<int64_t>(),  // through half: +-inf
            (std::vector<int64_t>{0, INT32_MAX, INT32_MIN, 3, -2, INT32_MAX, INT32_MIN}));
  EXPECT_EQ(full({2}, std::nan(""), {.dtype = kInt64}).to_vector<int64_t>(), (std::vector<int64_t>{0, 0}));
  EXPECT_EQ(full({1}, 1e30, {.dtype = kInt32}).to(kInt64).to_vector<int64_t>(),
            (std::vector<int64_t>{INT32_MAX}));
}

}  // namespace
}  // namespace nabla
