// CUDA random factories against the CPU: the same seed gives the same tensor on both devices
// (Philox is counter-based and both backends map element i to the same block and lane). rand,
// randint and bernoulli agree bit for bit; randn agrees to the ulps of the two libms' log, sqrt,
// sin and cos. Sizes include odd tails, a million elements and channels_last layouts, and the
// generators must advance identically.
#include "parity_util.h"

namespace nabla {
namespace {

using namespace testing;  // NOLINT: test helpers

constexpr Tolerance kExact{0, 0};

const std::vector<Shape> kSizes = {{1}, {7}, {3, 5, 2}, {(int64_t{1} << 20) + 3}};

TEST(CudaParityRandom, RandIsBitwiseTheSameOnCpuAndCudaForASeed) {
  SKIP_WITHOUT_GPU();
  uint64_t seed = test_seed();
  for (DType dtype : kFloatDTypes) {
    for (const Shape& sizes : kSizes) {
      Generator on_cpu(++seed), on_cuda(seed);
      for (int draw = 0; draw < 2; ++draw) {  // the second draw checks the offsets advanced alike
        Tensor expected = rand(sizes, {.dtype = dtype}, &on_cpu);
        Tensor actual = rand(sizes, {.dtype = dtype, .device = Device::cuda()}, &on_cuda);
        EXPECT_TRUE(matches_cpu(actual, expected, kExact)) << dtype_name(dtype) << " " << shape_str(sizes);
      }
      EXPECT_EQ(on_cuda.state().offset, on_cpu.state().offset);
    }
  }
}

TEST(CudaParityRandom, RandnMatchesTheCpuForASeed) {
  SKIP_WITHOUT_GPU();
  uint64_t seed = test_seed();
  for (DType dtype : kFloatDTypes) {
    for (const Shape& sizes : kSizes) {
      Generator on_cpu(++seed), on_cuda(seed);
      for (int draw = 0; draw < 2; ++draw) {
        Tensor expected = randn(sizes, {.dtype = dtype}, &on_cpu);
        Tensor actual = randn(sizes, {.dtype = dtype, .device = Device::cuda()}, &on_cuda);
        EXPECT_TRUE(matches_cpu(actual, expected)) << dtype_name(dtype) << " " << shape_str(sizes);
      }
    }
  }
  // float32: the two libms differ in the last bits of a double, which almost never moves the
  // rounded float.
  Generator on_cpu(seed), on_cuda(seed);
  std::vector<float> a = randn({100000}, {}, &on_cpu).to_vector<float>();
  std::vector<float> b = randn({100000}, {.device = Device::cuda()}, &on_cuda).cpu().to_vector<float>();
  int64_t same = 0;
  for (size_t i = 0; i < a.size(); ++i) same += a[i] == b[i];
  EXPECT_GE(same, 99990);
}

TEST(CudaParityRandom, RandintIsTheSameOnCpuAndCudaForEveryDtypeAndRange) {
  SKIP_WITHOUT_GPU();
  uint64_t seed = test_seed();
  struct Range {
    int64_t low, high;
  };
  for (DType dtype : kNumericDTypes) {
    std::vector<Range> ranges = {{0, 10}, {3, 200}};
    if (dtype != kUInt8) ranges.push_back({-1000, 1000});
    if (dtype == kInt64) ranges.push_back({-(int64_t{1} << 40), int64_t{1} << 45});
    for (Range r : ranges) {
      for (const Shape& sizes : kSizes) {
        Generator on_cpu(++seed), on_cuda(seed);
        Tensor expected = randint(r.low, r.high, sizes, {.dtype = dtype}, &on_cpu);
        Tensor actual = randint(r.low, r.high, sizes, {.dtype = dtype, .device = Device::cuda()}, &on_cuda);
        EXPECT_TRUE(matches_cpu(actual, expected, kExact))
            << dtype_name(dtype) << " [" << r.low << ", " << r.high << ") " << shape_str(sizes);
      }
    }
  }
}

TEST(CudaParityRandom, BernoulliIsTheSameOnCpuAndCudaForEveryDtype) {
  SKIP_WITHOUT_GPU();
  uint64_t seed = test_seed();
  for (DType dtype : kAllDTypes) {
    for (double p : {0.0, 0.3, 0.5, 1.0}) {
      for (const Shape& sizes : kSizes) {
        Generator on_cpu(++seed), on_cuda(seed);
        Tensor expected = bernoulli(sizes, p, {.dtype = dtype}, &on_cpu);
        Tensor actual = bernoulli(sizes, p, {.dtype = dtype, .device = Device::cuda()}, &on_cuda);
        EXPECT_TRUE(matches_cpu(actual, expected, kExact))
            << dtype_name(dtype) << " p=" << p << " " << shape_str(sizes);
      }
    }
  }
  // And the mask has the asked-for density.
  Generator gen(seed);
  std::vector<float> mask =
      bernoulli({1 << 20}, 0.3, {.device = Device::cuda()}, &gen).cpu().to_vector<float>();
  double ones_count = 0;
  for (float v : mask) ones_count += v;
  EXPECT_NEAR(ones_count / static_cast<double>(mask.size()), 0.3, 0.003);
}

// Random factories fill dense storage in memory order, so a channels_last tensor is the same
// on both devices too.
TEST(CudaParityRandom, ChannelsLastRandomTensorsMatchTheCpu) {
  SKIP_WITHOUT_GPU();
  uint64_t seed = test_seed();
  const TensorOptions host{.memory_format = MemoryFormat::ChannelsLast};
  const TensorOptions dev{.device = Device::cuda(), .memory_format = MemoryFormat::ChannelsLast};
  Generator a(seed), b(seed);
  Tensor expected = rand({2, 3, 4, 5}, host, &a);
  Tensor actual = rand({2, 3, 4, 5}, dev, &b);
  EXPECT_TRUE(actual.is_contiguous(MemoryFormat::ChannelsLast));
  EXPECT_TRUE(matches_cpu(actual, expected, kExact));
  EXPECT_TRUE(matches_cpu(randn({2, 3, 4, 5}, dev, &b), randn({2, 3, 4, 5}, host, &a)));
  EXPECT_TRUE(
      matches_cpu(bernoulli({2, 3, 4, 5}, 0.5, dev, &b), bernoulli({2, 3, 4, 5}, 0.5, host, &a), kExact));
}

TEST(CudaParityRandom, ManualSeedMakesTheDefaultGeneratorsAgree) {
  SKIP_WITHOUT_GPU();
  manual_seed(test_seed());
  Tensor expected = rand({1000});
  Tensor actual = rand({1000}, {.device = Device::cuda()});
  EXPECT_TRUE(matches_cpu(actual, expected, kExact));
  // Different draws from one generator differ.
  EXPECT_FALSE(all_close(rand({1000}, {.device = Device::cuda()}).cpu(), expected, 0, 0));
}

}  // namespace
}  // namespace nabla
