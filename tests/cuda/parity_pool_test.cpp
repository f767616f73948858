// CUDA pooling and dropout against the CPU backend: max (values and indices), average and
// adaptive average pooling, forward and backward, for every floating dtype, NCHW and
// channels_last (read in place, output kept channels_last), every option, and a ResNet-sized
// stem pool; dropout masks equal on both devices for one seed.
#include "parity_util.h"

namespace nabla {
namespace {

using namespace testing;  // NOLINT: test helpers

struct PoolCase {
  const char* name;
  Shape x;
  std::function<Tensor(const Tensor&)> op;
};

std::vector<PoolCase> pool_cases() {
  return {
      {"max 3x3/2 pad 1",
       {2, 3, 9, 7},
       [](const Tensor& t) { return max_pool2d(t, {.kernel = 3, .stride = 2, .padding = 1}); }},
      {"max dilation ceil_mode",
       {2, 4, 11, 10},
       [](const Tensor& t) {
         return max_pool2d(
             t, {.kernel = {3, 2}, .stride = {2, 1}, .padding = 1, .dilation = 2, .ceil_mode = true});
       }},
      // 16 channels: in NHWC the CUDA kernels take them 8 to a thread.
      {"max dilation ceil_mode, 16 channels",
       {2, 16, 11, 10},
       [](const Tensor& t) {
         return max_pool2d(
             t, {.kernel = {3, 2}, .stride = {2, 1}, .padding = 1, .dilation = 2, .ceil_mode = true});
       }},
      {"avg 2x2", {2, 3, 8, 6}, [](const Tensor& t) { return avg_pool2d(t, {.kernel = 2}); }},
      {"avg 3x3/2 pad 1 ceil_mode",
       {2, 3, 8, 7},
       [](const Tensor& t) {
         return avg_pool2d(t, {.kernel = 3, .stride = 2, .padding = 1, .ceil_mode = true});
       }},
      {"avg padding excluded",
       {2, 5, 7, 7},
       [](const Tensor& t) {
         return avg_pool2d(t, {.kernel = 3, .stride = 2, .padding = 1, .count_include_pad = false});
       }},
      {"adaptive 7x5 -> 3x2",
       {2, 3, 7, 5},
       [](const Tensor& t) {
         return adaptive_avg_pool2d(t, {3, 2});
       }},
      {"adaptive 3x4 -> 5x6",
       {2, 3, 3, 4},
       [](const Tensor& t) {
         return adaptive_avg_pool2d(t, {5, 6});
       }},
      {"global average", {4, 16, 7, 7}, [](const Tensor& t) { return adaptive_avg_pool2d(t, 1); }},
  };
}

TEST(CudaParityPool, ForwardAndBackwardMatchTheCpuForEveryDtypeAndLayout) {
  SKIP_WITHOUT_GPU();
  uint64_t seed = test_seed();
  for (const PoolCase& c : pool_cases()) {
    for (DType dtype : kFloatDTypes) {
      for (MemoryFormat format : {MemoryFormat::Contiguous, MemoryFormat::ChannelsLast}) {
        const char* layout = format == MemoryFormat::Contiguous ? "NCHW" : "NHWC";
        const Tensor host = random_values(c.x, ++seed, dtype).contiguous(format);
        Tensor x = host.detach().requires_grad_(true), xd = to_cuda(host).requires_grad_(true);
        EXPECT_TRUE(xd.is_contiguous(format));
        Tensor y = c.op(x), yd = c.op(xd);
        EXPECT_TRUE(matches_cpu(yd, y)) << context(c.name, dtype, layout);
        if (format == MemoryFormat::ChannelsLast) EXPECT_TRUE(yd.is_contiguous(format)) << c.name;
        const Tensor g = random_values(y.sizes(), ++seed, dtype);
        y.backward(g);
        yd.backward(to_cuda(g));
        EXPECT_TRUE(matches_cpu(xd.grad(), x.grad())) << context(c.name, dtype, layout) << " grad";
        if (format == MemoryFormat::ChannelsLast) EXPECT_TRUE(xd.grad().is_contiguous(format)) << c.name;
      }
    }
  }
}

TEST(CudaParityPool, MaxIndicesAreTheCpuIndices) {
  SKIP_WITHOUT_GPU();
  uint64_t seed = test_seed();
  for (DType dtype : kFloatDTypes) {  // 16-bit values tie often: the first of equal values wins on both
    for (MemoryFormat format : {MemoryFormat::Contiguous, MemoryFormat::ChannelsLast}) {
      for (int64_t channels : {5, 24}) {  // 24: eight channels to a thread in NHWC
        const Tensor x = random_values({3, channels, 10, 9}, ++seed, dtype).contiguous(format);
        const MaxPool2dOptions o{.kernel = 3, .stride = 2, .padding = 1, .ceil_mode = true};
        auto [y, indices] = max_pool2d_with_indices(x, o);
        auto [yd, indices_d] = max_pool2d_with_indices(to_cuda(x), o);
        EXPECT_TRUE(matches_cpu(yd, y, Tolerance{0, 0})) << dtype_name(dtype);
        EXPECT_TRUE(matches_cpu(indices_d, indices)) << dtype_name(dtype);
      }
    }
  }
}

TEST(CudaParityPool, ResNetStemMaxPoolAndGlobalAverageMatchTheCpu) {
  SKIP_WITHOUT_GPU();
  uint64_t seed = test_seed();
  for (DType dtype : {kFloat32, kFloat16}) {
    const Tensor host =
        random_values({4, 64, 112, 112}, ++seed, dtype).contiguous(MemoryFormat::ChannelsLast);
    Tensor x = host.detach().requires_grad_(true), xd = to_cuda(host).requires_grad_(true);
    Tensor y = max_pool2d(x, {.kernel = 3, .stride = 2, .padding = 1});
    Tensor yd = max_pool2d(xd, {.kernel = 3, .stride = 2, .padding = 1});
    EXPECT_TRUE(matches_cpu(yd, y)) << dtype_name(dtype);
    Tensor z = adaptive_avg_pool2d(y, 1), zd = adaptive_avg_pool2d(yd, 1);
    EXPECT_TRUE(matches_cpu(zd, z, dtype == kFloat32 ? Tolerance{1e-5, 1e-6} : tolerance_for(dtype)));
    const Tensor g = random_values(z.sizes(), ++seed, dtype);
    z.backward(g);
    zd.backward(to_cuda(g));
    EXPECT_TRUE(matches_cpu(xd.grad(), x.grad())) << dtype_name(dtype);
  }
}

TEST(CudaParityDropout, OneSeedGivesTheSameMaskOnCpuAndCuda) {
  SKIP_WITHOUT_GPU();
  uint64_t seed = test_seed();
  for (DType dtype : kFloatDTypes) {
    for (MemoryFormat format : {MemoryFormat::Contiguous, MemoryFormat::ChannelsLast}) {
      const Tensor host = random_values({4, 3, 9, 7}, ++seed, dtype).contiguous(format);
      Tensor x = host.detach().requires_grad_(true), xd = to_cuda(host).requires_grad_(true);
      Generator on_cpu(seed), on_cuda(seed);
      Tensor y = dropout(x, {.p = 0.3, .generator = &on_cpu}),
             yd = dropout(xd, {.p = 0.3, .generator = &on_cuda});
      EXPECT_TRUE(matches_cpu(ne(yd, 0.0), ne(y, 0.0))) << dtype_name(dtype) << " mask";
      EXPECT_TRUE(matches_cpu(yd, y)) << dtype_name(dtype);
      EXPECT_EQ(yd.is_contiguous(format), true);
      const Tensor g = random_values(y.sizes(), ++seed, dtype);
      y.backward(g);
      yd.backward(to_cuda(g));
      EXPECT_TRUE(matches_cpu(xd.grad(), x.grad())) << dtype_name(dtype) << " grad";
      EXPECT_EQ(on_cuda.state().offset, on_cpu.state().offset);
    }
  }
}

}  // namespace
}  // namespace nabla
