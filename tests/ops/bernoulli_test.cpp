// bernoulli(): 0/1 masks with the asked-for density, reproducible from the seed, in any dtype.
#include "test_util.h"

namespace nabla {
namespace {

using testing::all_close;
using testing::test_seed;

TEST(Bernoulli, DrawsOnesWithProbabilityP) {
  Generator gen(test_seed());
  for (double p : {0.1, 0.5, 0.9}) {
    std::vector<double> v = bernoulli({200000}, p, {.dtype = kFloat64}, &gen).to_vector<double>();
    double ones = 0;
    for (double x : v) {
      ASSERT_TRUE(x == 0.0 || x == 1.0) << x;
      ones += x;
    }
    EXPECT_NEAR(ones / static_cast<double>(v.size()), p, 0.005) << "p=" << p;
  }
}

TEST(Bernoulli, ZeroAndOneAreDeterministicAndBadProbabilitiesAreRejected) {
  Tensor never = bernoulli({1000}, 0.0, {.dtype = kInt64});
  Tensor always = bernoulli({1000}, 1.0, {.dtype = kBool});
  EXPECT_TRUE(all_close(never, zeros({1000}, {.dtype = kInt64}), 0, 0));
  EXPECT_TRUE(all_close(always.to(kInt64), ones({1000}, {.dtype = kInt64}), 0, 0));
  EXPECT_NABLA_ERROR(bernoulli({3}, 1.5), "bernoulli", "[0, 1]", "1.5");
  EXPECT_NABLA_ERROR(bernoulli({3}, -0.1), "bernoulli", "[0, 1]");
}

TEST(Bernoulli, IsReproducibleFromTheSeedAndUsesTheUniformDrawOfEachElement) {
  uint64_t seed = test_seed();
  Generator a(seed), b(seed), c(seed);
  Tensor m1 = bernoulli({4, 33}, 0.4, {}, &a);
  Tensor m2 = bernoulli({4, 33}, 0.4, {.dtype = kUInt8}, &b);
  EXPECT_TRUE(all_close(m1, m2.to(kFloat32), 0, 0));
  // Element i is 1 exactly where rand's element i (same seed, same offset) is below p.
  Tensor u = rand({4, 33}, {}, &c);
  EXPECT_TRUE(all_close(m1, lt(u, 0.4).to(kFloat32), 0, 0));
  EXPECT_EQ(a.state().offset, c.state().offset);
  // Later draws differ.
  EXPECT_FALSE(all_close(bernoulli({4, 33}, 0.4, {}, &a), m1, 0, 0));
}

TEST(Bernoulli, ChannelsLastMasksFillStorageInMemoryOrder) {
  Generator a(test_seed()), b(test_seed());
  Tensor cl = bernoulli({2, 3, 4, 5}, 0.5, {.memory_format = MemoryFormat::ChannelsLast}, &a);
  EXPECT_TRUE(cl.is_contiguous(MemoryFormat::ChannelsLast));
  Tensor flat = bernoulli({120}, 0.5, {}, &b);
  // Storage order of the channels_last mask is NHWC: a permute to (N, H, W, C) is contiguous.
  EXPECT_TRUE(all_close(cl.permute({0, 2, 3, 1}).contiguous().view({120}), flat, 0, 0));
}

}  // namespace
}  // namespace nabla
