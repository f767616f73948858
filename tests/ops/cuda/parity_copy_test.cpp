// CUDA copies and value factories against the CPU: casts between all 8x8 dtype pairs in every
// layout (source and destination strided, channels_last, broadcast, unaligned), large casts,
// copies across devices in both directions into dense and strided destinations, fill/zero and
// full/zeros/ones, arange and linspace. Conversions are deterministic, so results are exact.
#include <map>
#include <random>

#include "parity_util.h"

namespace nabla {
namespace {

using namespace testing;  // NOLINT: test helpers

constexpr Tolerance kExact{0, 0};

// Values every conversion is defined on: floats in [1, 20] (or +-[1, 20] when signed), bools.
Tensor cast_source(const Shape& sizes, uint64_t seed, DType dtype, bool signed_values) {
  if (dtype == kBool) return random_values(sizes, seed, kBool);
  Tensor x = random_input(sizes, seed, kFloat64);
  if (!signed_values) x = abs(x);
  return (x * 10.0).to(dtype);
}

struct CopyLayout {
  const char* name;
  Shape src_storage;
  std::function<Tensor(const Tensor&)> src_view;  // logical (2, 3, 4, 5)
  std::function<Tensor(DType, Device)> make_dst;  // a fresh destination of that shape
};

std::vector<CopyLayout> copy_layouts() {
  auto dense = [](DType dtype, Device device) {
    return Tensor::empty({2, 3, 4, 5}, {.dtype = dtype, .device = device});
  };
  auto cl = [](DType dtype, Device device) {
    return Tensor::empty({2, 3, 4, 5},
                         {.dtype = dtype, .device = device, .memory_format = MemoryFormat::ChannelsLast});
  };
  std::vector<Layout> views = layouts_2345();
  std::vector<CopyLayout> out;
  for (const Layout& v : views) out.push_back({v.name, v.storage, v.view, dense});
  out.push_back({"contiguous to channels_last", {2, 3, 4, 5}, [](const Tensor& t) { return t; }, cl});
  out.push_back({"permuted to channels_last",
                 {5, 3, 4, 2},
                 [](const Tensor& t) {
                   return t.permute({3, 1, 2, 0});
                 },
                 cl});
  return out;
}

TEST(CudaParityCopy, CastsBetweenEveryDtypePairMatchTheCpuInEveryLayout) {
  SKIP_WITHOUT_GPU();
  uint64_t seed = test_seed();
  for (DType from : kAllDTypes) {
    for (DType to : kAllDTypes) {
      // Negative values only where both sides represent them (float -> uint8 is undefined).
      bool signed_values = from != kUInt8 && from != kBool && to != kUInt8;
      for (const CopyLayout& layout : copy_layouts()) {
        Tensor base = cast_source(layout.src_storage, ++seed, from, signed_values);
        Tensor dst_cpu = layout.make_dst(to, Device::cpu());
        Tensor dst_cuda = layout.make_dst(to, Device::cuda());
        dst_cpu.copy_(layout.src_view(base));
        dst_cuda.copy_(layout.src_view(to_cuda(base)));
        EXPECT_TRUE(matches_cpu(dst_cuda, dst_cpu, kExact))
            << dtype_name(from) << " -> " << dtype_name(to) << " " << layout.name;
      }
    }
  }
}

// Writing into a strided view changes exactly the viewed elements.
TEST(CudaParityCopy, CopiesIntoStridedDestinationsTouchOnlyTheView) {
  SKIP_WITHOUT_GPU();
  uint64_t seed = test_seed();
  for (DType from : {kFloat32, kFloat16, kInt64, kBool}) {
    for (DType to : {kFloat32, kBFloat16, kInt32, kUInt8}) {
      Tensor big = cast_source({6, 7, 8}, ++seed, to, false);
      Tensor big_cuda = to_cuda(big);
      Tensor src = cast_source({8, 3, 3}, ++seed, from, false);
      big.slice(0, 1, 6, 2).transpose(0, 2).narrow(1, 2, 3).copy_(src);
      big_cuda.slice(0, 1, 6, 2).transpose(0, 2).narrow(1, 2, 3).copy_(to_cuda(src));
      EXPECT_TRUE(matches_cpu(big_cuda, big, kExact)) << dtype_name(from) << " -> " << dtype_name(to);
    }
  }
}

TEST(CudaParityCopy, LargeAndUnalignedCastsMatchTheCpu) {
  SKIP_WITHOUT_GPU();
  uint64_t seed = test_seed();
  const int64_t n = (int64_t{1} << 20) + 3;
  const std::vector<std::pair<DType, DType>> pairs = {
      {kFloat32, kFloat16}, {kFloat16, kFloat32}, {kFloat32, kBFloat16}, {kInt64, kFloat32},
      {kFloat64, kFloat32}, {kFloat32, kFloat32}, {kUInt8, kFloat16},    {kFloat32, kBool}};
  for (auto [from, to] : pairs) {
    Tensor src = cast_source({n}, ++seed, from, to != kUInt8 && from != kUInt8);
    Tensor src_cuda = to_cuda(src);
    for (int64_t start : {0, 1}) {
      Tensor expected = src.narrow(0, start, n - start).to(to);
      Tensor actual = src_cuda.narrow(0, start, n - start).to(to);
      EXPECT_TRUE(matches_cpu(actual, expected, kExact))
          << dtype_name(from) << " -> " << dtype_name(to) << " +" << start;
    }
  }
}

// Across devices only dense bytes travel; strided sources are made dense on their own side and
// strided destinations are filled on theirs.
TEST(CudaParityCopy, CrossDeviceCopiesHandleStridesBroadcastsAndCasts) {
  SKIP_WITHOUT_GPU();
  uint64_t seed = test_seed();
  for (DType from : {kFloat32, kFloat64, kFloat16, kInt64}) {
    for (DType to : {kFloat32, kFloat16, kInt32}) {
      Tensor host = cast_source({5, 3, 4, 2}, ++seed, from, true);
      Tensor strided = host.permute({3, 1, 2, 0});  // (2, 3, 4, 5)
      std::string what = std::string(dtype_name(from)) + " -> " + std::string(dtype_name(to));
      // CPU strided -> CUDA dense, channels_last and strided destinations.
      Tensor expected = Tensor::empty({2, 3, 4, 5}, {.dtype = to});
      expected.copy_(strided);
      EXPECT_TRUE(matches_cpu(strided.to(Device::cuda(), to), expected, kExact)) << what;
      Tensor cl = Tensor::empty(
          {2, 3, 4, 5}, {.dtype = to, .device = Device::cuda(), .memory_format = MemoryFormat::ChannelsLast});
      cl.copy_(strided);
      EXPECT_TRUE(matches_cpu(cl, expected, kExact)) << what << " into channels_last";
      Tensor big = zeros({4, 3, 4, 7}, {.dtype = to, .device = Device::cuda()});
      big.slice(0, 0, 4, 2).narrow(3, 1, 5).copy_(strided);
      Tensor big_expected = zeros({4, 3, 4, 7}, {.dtype = to});
      big_expected.slice(0, 0, 4, 2).narrow(3, 1, 5).copy_(strided);
      EXPECT_TRUE(matches_cpu(big, big_expected, kExact)) << what << " into a strided view";
      // CUDA strided -> CPU dense and strided destinations.
      Tensor dev_strided = to_cuda(host).permute({3, 1, 2, 0});
      EXPECT_TRUE(all_close(dev_strided.to(Device::cpu(), to), expected, 0, 0)) << what << " back";
      Tensor host_big = zeros({4, 3, 4, 7}, {.dtype = to});
      host_big.slice(0, 0, 4, 2).narrow(3, 1, 5).copy_(dev_strided);
      EXPECT_TRUE(all_close(host_big, big_expected, 0, 0)) << what << " back into a strided view";
      // A broadcast source travels unexpanded and expands on the far side.
      Tensor row = cast_source({1, 3, 1, 5}, ++seed, from, true);
      Tensor wide = Tensor::empty({2, 3, 4, 5}, {.dtype = to, .device = Device::cuda()});
      wide.copy_(row);
      Tensor wide_expected = Tensor::empty({2, 3, 4, 5}, {.dtype = to});
      wide_expected.copy_(row);
      EXPECT_TRUE(matches_cpu(wide, wide_expected, kExact)) << what << " broadcast";
    }
  }
}

TEST(CudaParityCopy, FillAndConstantFactoriesMatchTheCpu) {
  SKIP_WITHOUT_GPU();
  uint64_t seed = test_seed();
  for (DType dtype : kAllDTypes) {
    for (double value : {2.75, 0.0, 1.0, -1.5}) {
      if (value < 0 && (dtype == kUInt8)) continue;
      std::string what = std::string(dtype_name(dtype)) + " " + std::to_string(value);
      EXPECT_TRUE(matches_cpu(full({3, 1, 7}, value, {.dtype = dtype, .device = Device::cuda()}),
                              full({3, 1, 7}, value, {.dtype = dtype}), kExact))
          << what;
      // Into a strided view and a channels_last tensor: only their elements change.
      Tensor big = random_values({6, 5, 4}, ++seed, dtype);
      Tensor big_cuda = to_cuda(big);
      big.slice(0, 1, 6, 2).transpose(1, 2).fill_(value);
      big_cuda.slice(0, 1, 6, 2).transpose(1, 2).fill_(value);
      EXPECT_TRUE(matches_cpu(big_cuda, big, kExact)) << what << " strided";
      Tensor cl = to_cuda(random_values({2, 4, 5, 3}, ++seed, dtype)).permute({0, 3, 1, 2});
      cl.fill_(value);
      EXPECT_TRUE(matches_cpu(cl, full({2, 3, 4, 5}, value, {.dtype = dtype}), kExact))
          << what << " channels_last";
    }
    EXPECT_TRUE(matches_cpu(zeros({1000, 3}, {.dtype = dtype, .device = Device::cuda()}),
                            zeros({1000, 3}, {.dtype = dtype}), kExact));
    EXPECT_TRUE(matches_cpu(ones({1000, 3}, {.dtype = dtype, .device = Device::cuda()}),
                            ones({1000, 3}, {.dtype = dtype}), kExact));
    Tensor z = to_cuda(random_values({(1 << 20) + 3}, ++seed, dtype));
    z.zero_();
    EXPECT_TRUE(matches_cpu(z, zeros({(1 << 20) + 3}, {.dtype = dtype}), kExact)) << dtype_name(dtype);
  }
}

TEST(CudaParityCopy, ArangeAndLinspaceMatchTheCpuExactly) {
  SKIP_WITHOUT_GPU();
  const TensorOptions cuda{.device = Device::cuda()};
  for (DType dtype : kNumericDTypes) {
    TensorOptions host_opts{.dtype = dtype}, dev_opts{.dtype = dtype, .device = Device::cuda()};
    std::string name(dtype_name(dtype));
    EXPECT_TRUE(matches_cpu(arange(200, dev_opts), arange(200, host_opts), kExact)) << name;
    if (dtype != kUInt8) {  // negative values
      EXPECT_TRUE(matches_cpu(arange(-3, 7.5, 0.35, dev_opts), arange(-3, 7.5, 0.35, host_opts), kExact))
          << name;
      EXPECT_TRUE(matches_cpu(linspace(-1, 1, 101, dev_opts), linspace(-1, 1, 101, host_opts), kExact))
          << name;
    }
    EXPECT_TRUE(matches_cpu(linspace(0.1, 10, 1, dev_opts), linspace(0.1, 10, 1, host_opts), kExact)) << name;
    EXPECT_TRUE(matches_cpu(linspace(2, 3, 0, dev_opts), linspace(2, 3, 0, host_opts), kExact)) << name;
    EXPECT_TRUE(matches_cpu(linspace(0, 255, 7, dev_opts), linspace(0, 255, 7, host_opts), kExact)) << name;
  }
  int64_t n = (int64_t{1} << 20) + 3;
  EXPECT_TRUE(matches_cpu(arange(n, cuda), arange(n), kExact));
  EXPECT_TRUE(matches_cpu(arange(0.5, 1e6, 0.999, cuda), arange(0.5, 1e6, 0.999), kExact));
  // The last linspace value is `end` exactly.
  EXPECT_EQ(linspace(0.0, 0.3, 7, cuda).cpu().to_vector<float>().back(), 0.3f);
}

}  // namespace
}  // namespace nabla

namespace nabla {
namespace {

using namespace testing;  // NOLINT: test helpers

// copy_many against one CPU copy_ per pair: 300 pairs of mixed dtypes and sizes (from one
// element up, so byte, 4-byte and 16-byte words all occur; over 120, so one batch is split),
// written into views at scattered offsets of one buffer per dtype. The whole buffers are
// compared, so a copy that spills past its view fails too. Channels_last pairs go in the batch;
// a layout change and a dtype change take the one-by-one path.
TEST(CudaCopyMany, MatchesOneCopyPerPairAndTouchesNothingElse) {
  SKIP_WITHOUT_GPU();
  uint64_t seed = test_seed();
  std::mt19937_64 rng(seed);
  const std::vector<DType> dtypes = {kFloat32, kFloat16, kUInt8, kInt64};
  std::map<DType, Tensor> cpu_buffers, cuda_buffers;
  std::map<DType, int64_t> used;
  for (DType d : dtypes) {
    cpu_buffers[d] = random_values({300000}, ++seed, d);
    cuda_buffers[d] = to_cuda(cpu_buffers[d]);
    used[d] = 0;
  }
  TensorList cuda_dsts, cuda_srcs, cpu_dsts, cpu_srcs;
  auto add = [&](DType d, const Shape& sizes, const Shape& dst_strides, const Tensor& cpu_src) {
    const int64_t offset = used[d] + static_cast<int64_t>(rng() % 7);  // odd gaps: odd addresses
    used[d] = offset + numel_of(sizes);
    ASSERT_LE(used[d], 300000) << "the test's buffer is too small";
    cpu_dsts.push_back(cpu_buffers[d].as_strided(sizes, dst_strides, offset));
    cuda_dsts.push_back(cuda_buffers[d].as_strided(sizes, dst_strides, offset));
    cpu_srcs.push_back(cpu_src);
    cuda_srcs.push_back(
        cpu_src.to(Device::cuda(), cpu_src.dtype()).contiguous(cpu_src.suggest_memory_format()));
  };
  for (int i = 0; i < 300; ++i) {
    DType d = dtypes[rng() % dtypes.size()];
    int64_t n = i % 10 == 0 ? 1 + static_cast<int64_t>(rng() % 20000) : 1 + static_cast<int64_t>(rng() % 300);
    add(d, {n}, {1}, random_values({n}, ++seed, d));
  }
  const Shape cl_sizes = {3, 5, 2, 4};
  const Shape cl_strides = {40, 1, 20, 5};
  Tensor cl_src = random_values(cl_sizes, ++seed, kFloat32).contiguous(MemoryFormat::ChannelsLast);
  add(kFloat32, cl_sizes, cl_strides, cl_src);                                     // batched
  add(kFloat32, cl_sizes, cl_strides, random_values(cl_sizes, ++seed, kFloat32));  // NCHW into NHWC
  add(kFloat32, {77}, {1}, random_values({77}, ++seed, kFloat16));                 // a cast
  ASSERT_EQ(cuda_dsts.size(), 303u);

  copy_many(cuda_dsts, cuda_srcs);
  for (size_t i = 0; i < cpu_dsts.size(); ++i) cpu_dsts[i].copy_(cpu_srcs[i]);
  for (DType d : dtypes) {
    EXPECT_TRUE(matches_cpu(cuda_buffers[d], cpu_buffers[d], kExact)) << dtype_name(d);
  }
}

}  // namespace
}  // namespace nabla
