// CUDA pooling and dropout against the CPU backend: max (values and indices), average and
// adaptive average pooling, forward and backward, for every floating dtype, NCHW and
// channels_last (read in place, output kept channels_last), every option, and a ResNet-sized
// stem pool; dropout masks equal on both devices for one seed. Max pooling in both index formats
// (uint8 window offsets for max_pool2d's backward, int64 plane positions for
// max_pool2d_with_indices) and its double backward; NHWC channel groups with and without 16-byte
// alignment (packed and one-by-one loads); the global average pooling backward's own kernel.
#include <cmath>

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

// Values on a grid of halves in [-2, 2], exact in every floating dtype, so that windows hold ties.
Tensor tied_values(const Shape& sizes, uint64_t seed, DType dtype) {
  std::vector<double> v = random_values(sizes, seed, kFloat64).to_vector<double>();
  for (double& e : v) e = std::round(e * 2.0) / 2.0;
  return tensor<double>(v, sizes).to(dtype);
}

struct MaxCase {
  const char* name;
  Shape x;  // C is set per run
  MaxPool2dOptions o;
};

std::vector<MaxCase> max_index_cases() {
  return {
      {"3x3/2 pad 1", {2, 0, 9, 8}, {.kernel = 3, .stride = 2, .padding = 1}},
      {"dilation ceil_mode",
       {2, 0, 11, 10},
       {.kernel = {3, 2}, .stride = {2, 1}, .padding = 1, .dilation = 2, .ceil_mode = true}},
      {"15x17: 255 taps, uint8 offsets",
       {1, 0, 19, 20},
       {.kernel = {15, 17}, .stride = 2, .padding = {7, 8}}},
      {"16x16: 256 taps, int64 positions", {1, 0, 20, 18}, {.kernel = 16, .stride = 2, .padding = 1}},
  };
}

TEST(CudaParityPool, BothMaxIndexFormatsGiveTheCpuValuesAndGradients) {
  SKIP_WITHOUT_GPU();
  uint64_t seed = test_seed();
  for (const MaxCase& c : max_index_cases()) {
    for (int64_t channels : {5, 16}) {  // 16: eight channels to a thread in NHWC
      const Shape shape{c.x[0], channels, c.x[2], c.x[3]};
      for (DType dtype : kFloatDTypes) {
        for (MemoryFormat format : {MemoryFormat::Contiguous, MemoryFormat::ChannelsLast}) {
          const Tensor host = tied_values(shape, ++seed, dtype).contiguous(format);
          for (bool with_indices : {false, true}) {
            const std::string what =
                context(c.name, dtype, format == MemoryFormat::Contiguous ? "NCHW" : "NHWC") +
                " C=" + std::to_string(channels) +
                (with_indices ? " max_pool2d_with_indices" : " max_pool2d");
            auto pool = [&](const Tensor& t) {
              return with_indices ? max_pool2d_with_indices(t, c.o).first : max_pool2d(t, c.o);
            };
            Tensor x = host.detach().requires_grad_(true), xd = to_cuda(host).requires_grad_(true);
            Tensor y = pool(x), yd = pool(xd);
            EXPECT_TRUE(matches_cpu(yd, y, Tolerance{0, 0})) << what;
            const Tensor g = random_values(y.sizes(), ++seed, dtype).contiguous(format);
            y.backward(g);
            yd.backward(to_cuda(g));
            EXPECT_TRUE(matches_cpu(xd.grad(), x.grad())) << what << " grad";
          }
        }
      }
    }
  }
}

// The NHWC tensor of logical shape `nchw` whose data starts `offset` elements into `storage`
// (1-d): 16-byte vectors need offset % 8 == 0 for the 16-bit types, % 4 for float32 and % 2 for
// float64.
Tensor channels_last_at(const Tensor& storage, int64_t offset, const Shape& nchw) {
  return storage.narrow(0, offset, numel_of(nchw))
      .view({nchw[0], nchw[2], nchw[3], nchw[1]})
      .permute({0, 3, 1, 2});
}

TEST(CudaParityPool, ChannelsLastGroupsMatchTheCpuWithAndWithoutVectorAlignment) {
  SKIP_WITHOUT_GPU();
  uint64_t seed = test_seed();
  const Shape shape{2, 16, 9, 8};
  const std::vector<std::pair<const char*, std::function<Tensor(const Tensor&)>>> ops = {
      {"max_pool2d", [](const Tensor& t) { return max_pool2d(t, {.kernel = 3, .stride = 2, .padding = 1}); }},
      {"max_pool2d_with_indices",
       [](const Tensor& t) {
         return max_pool2d_with_indices(t, {.kernel = 3, .stride = 2, .padding = 1}).first;
       }},
      {"avg_pool2d",
       [](const Tensor& t) {
         return avg_pool2d(t, {.kernel = 3, .stride = 2, .padding = 1, .ceil_mode = true});
       }},
      {"adaptive 3x2",
       [](const Tensor& t) {
         return adaptive_avg_pool2d(t, {3, 2});
       }},
      {"global average", [](const Tensor& t) { return adaptive_avg_pool2d(t, 1); }},
  };
  for (DType dtype : kFloatDTypes) {
    // Offsets whose groups are 16-byte aligned (packed): 0 and 8 always, 4 for float32 and
    // float64, 1 never (one by one).
    for (int64_t offset : {0, 1, 4, 8}) {
      for (const auto& [name, op] : ops) {
        const std::string what = context(name, dtype) + " offset " + std::to_string(offset);
        const Tensor storage = tied_values({numel_of(shape) + 8}, ++seed, dtype);
        Tensor x = channels_last_at(storage, offset, shape).detach().requires_grad_(true);
        Tensor xd = channels_last_at(to_cuda(storage), offset, shape).detach().requires_grad_(true);
        ASSERT_TRUE(xd.is_contiguous(MemoryFormat::ChannelsLast)) << what;
        Tensor y = op(x), yd = op(xd);
        EXPECT_TRUE(matches_cpu(yd, y)) << what;
        const Tensor g_storage = random_values({y.numel() + 8}, ++seed, dtype);
        y.backward(channels_last_at(g_storage, offset, y.sizes()));
        yd.backward(channels_last_at(to_cuda(g_storage), offset, y.sizes()));
        EXPECT_TRUE(matches_cpu(xd.grad(), x.grad())) << what << " grad";
      }
    }
  }
}

TEST(CudaParityPool, GlobalAveragePoolingMatchesTheCpu) {
  // Windows covering the whole plane take their own backward kernel: grad / (H * W) broadcast.
  SKIP_WITHOUT_GPU();
  uint64_t seed = test_seed();
  const std::vector<std::pair<const char*, std::function<Tensor(const Tensor&)>>> ops = {
      {"adaptive 1x1", [](const Tensor& t) { return adaptive_avg_pool2d(t, 1); }},
      {"plane-sized kernel",
       [](const Tensor& t) {
         return avg_pool2d(t, {.kernel = {t.size(2), t.size(3)}});
       }},
      {"plane-sized kernel, padding excluded, ceil_mode",
       [](const Tensor& t) {
         return avg_pool2d(t,
                           {.kernel = {t.size(2), t.size(3)}, .ceil_mode = true, .count_include_pad = false});
       }},
  };
  for (const Shape& shape : {Shape{4, 16, 7, 7}, Shape{2, 5, 5, 3}, Shape{3, 2048, 1, 1}}) {
    for (DType dtype : kFloatDTypes) {
      for (MemoryFormat format : {MemoryFormat::Contiguous, MemoryFormat::ChannelsLast}) {
        for (const auto& [name, op] : ops) {
          const std::string what =
              context(name, dtype, format == MemoryFormat::Contiguous ? "NCHW" : "NHWC") + " " +
              shape_str(shape);
          const Tensor host = random_values(shape, ++seed, dtype).contiguous(format);
          Tensor x = host.detach().requires_grad_(true), xd = to_cuda(host).requires_grad_(true);
          Tensor y = op(x), yd = op(xd);
          EXPECT_TRUE(matches_cpu(yd, y)) << what;
          const Tensor g = random_values(y.sizes(), ++seed, dtype);
          y.backward(g);
          yd.backward(to_cuda(g));
          EXPECT_TRUE(matches_cpu(xd.grad(), x.grad())) << what << " grad";
        }
      }
    }
  }
}

TEST(CudaParityPool, MaxPoolDoubleBackwardMatchesTheCpu) {
  // The gradient of sum(grad_input * v) with respect to the output gradient gathers v at the
  // argmaxes, which the CUDA side finds from uint8 window offsets (or int64 for 256 taps).
  SKIP_WITHOUT_GPU();
  uint64_t seed = test_seed();
  for (const MaxCase& c : max_index_cases()) {
    const Shape shape{c.x[0], 16, c.x[2], c.x[3]};
    for (DType dtype : {kFloat32, kFloat64}) {
      for (MemoryFormat format : {MemoryFormat::Contiguous, MemoryFormat::ChannelsLast}) {
        const std::string what = context(c.name, dtype, format == MemoryFormat::Contiguous ? "NCHW" : "NHWC");
        const Tensor host = tied_values(shape, ++seed, dtype).contiguous(format);
        const Tensor v = random_values(shape, ++seed, dtype);
        Tensor x = host.detach().requires_grad_(true), xd = to_cuda(host).requires_grad_(true);
        const Tensor go_host = random_values(max_pool2d(host, c.o).sizes(), ++seed, dtype);
        Tensor go = go_host.detach().requires_grad_(true), god = to_cuda(go_host).requires_grad_(true);
        autograd::backward({max_pool2d(x, c.o)}, {go}, {.create_graph = true});
        autograd::backward({max_pool2d(xd, c.o)}, {god}, {.create_graph = true});
        EXPECT_TRUE(matches_cpu(xd.grad(), x.grad())) << what;
        (x.grad() * v).sum().backward();
        (xd.grad() * to_cuda(v)).sum().backward();
        EXPECT_TRUE(matches_cpu(god.grad(), go.grad(), Tolerance{0, 0})) << what;
      }
    }
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
