// normalize_images on the CPU against a hand loop of the textbook formula, for each output dtype
// and both layouts; its argument checks; and the DevicePrefetcher's refusal without a GPU.
#include <random>

#include "data/fake_datasets.h"
#include "nabla/core/cuda/runtime.h"
#include "nabla/data/device_prefetcher.h"
#include "nabla/data/normalize.h"
#include "test_util.h"

namespace nabla::data {
namespace {

Tensor random_images(int64_t n, int64_t h, int64_t w, int64_t c, uint64_t seed) {
  Tensor t = Tensor::empty({n, h, w, c}, {.dtype = kUInt8});
  std::mt19937_64 rng(seed);
  for (int64_t i = 0; i < t.numel(); ++i) t.data_ptr<uint8_t>()[i] = static_cast<uint8_t>(1 + rng() % 255);
  return t;
}

// (x / 255 - mean) / std in double, (N, C, H, W) element order.
std::vector<double> reference(const Tensor& images, const std::vector<float>& mean,
                              const std::vector<float>& stddev) {
  const int64_t n = images.size(0), h = images.size(1), w = images.size(2), c = images.size(3);
  std::vector<double> out;
  for (int64_t b = 0; b < n; ++b)
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t y = 0; y < h; ++y)
        for (int64_t x = 0; x < w; ++x) {
          double v = images.data_ptr<uint8_t>()[((b * h + y) * w + x) * c + ch];
          double m = mean.size() == 1 ? mean[0] : mean[static_cast<size_t>(ch)];
          double s = stddev.size() == 1 ? stddev[0] : stddev[static_cast<size_t>(ch)];
          out.push_back((v / 255.0 - m) / s);
        }
  return out;
}

TEST(Normalize, CpuPathMatchesAHandLoopForEveryDtypeAndLayout) {
  const uint64_t seed = testing::test_seed();
  Tensor images = random_images(3, 5, 7, 3, seed);
  NormalizeOptions base;  // ImageNet mean and std
  auto want = reference(images, base.mean, base.stddev);
  for (DType dtype : {kFloat32, kFloat16, kBFloat16}) {
    for (MemoryFormat format : {MemoryFormat::Contiguous, MemoryFormat::ChannelsLast}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) +
                   (format == MemoryFormat::ChannelsLast ? " NHWC" : " NCHW"));
      NormalizeOptions options = base;
      options.dtype = dtype;
      options.memory_format = format;
      Tensor out = normalize_images(images, options);
      ASSERT_EQ(out.sizes(), (Shape{3, 3, 5, 7}));
      EXPECT_EQ(out.dtype(), dtype);
      EXPECT_TRUE(out.is_contiguous(format));
      // to_vector reads in logical (N, C, H, W) order whatever the storage layout.
      std::vector<double> got = out.to(kFloat64).contiguous().to_vector<double>();
      double tolerance = dtype == kFloat32 ? 2e-6 : dtype == kFloat16 ? 2e-3 : 1.6e-2;
      for (size_t i = 0; i < want.size(); ++i)
        ASSERT_NEAR(got[i], want[i], tolerance * std::max(1.0, std::abs(want[i]))) << "element " << i;
    }
  }
}

TEST(Normalize, OneChannelAndScalarStatistics) {
  Tensor images = random_images(2, 4, 4, 1, testing::test_seed());
  NormalizeOptions options{.mean = {0.2860f}, .stddev = {0.3530f}};  // Fashion-MNIST's statistics
  Tensor out = normalize_images(images, options);
  ASSERT_EQ(out.sizes(), (Shape{2, 1, 4, 4}));
  auto want = reference(images, options.mean, options.stddev);
  auto got = out.to(kFloat64).to_vector<double>();
  for (size_t i = 0; i < want.size(); ++i)
    ASSERT_NEAR(got[i], want[i], 2e-6 * std::max(1.0, std::abs(want[i])));
}

TEST(Normalize, RejectsWhatItCannotNormalize) {
  Tensor images = random_images(1, 2, 2, 3, 1);
  EXPECT_NABLA_ERROR(normalize_images(images.to(kFloat32)), "(N, H, W, C) uint8");
  EXPECT_NABLA_ERROR(normalize_images(Tensor::empty({2, 2, 3}, {.dtype = kUInt8})), "(N, H, W, C) uint8");
  EXPECT_NABLA_ERROR(normalize_images(images, {.dtype = kInt64}), "float32, float16 or bfloat16", "int64");
  EXPECT_NABLA_ERROR(normalize_images(images, {.mean = {0.5f, 0.5f}}),
                     "mean needs 1 value or one per channel (3), got 2");
  EXPECT_NABLA_ERROR(normalize_images(images, {.stddev = {1.0f, 0.0f, 1.0f}}), "positive stddev");
  EXPECT_NABLA_ERROR(normalize_images(random_images(1, 2, 2, 5, 1), {.mean = {0.f}, .stddev = {1.f}}),
                     "1 to 4 channels");
}

TEST(DevicePrefetcher, WithoutAGpuTheConstructorSaysWhy) {
  if (nabla::cuda::is_available())
    GTEST_SKIP() << "a GPU is present; tests/data/cuda/prefetch_test.cpp covers it";
  DataLoader loader(std::make_shared<fakes::FakeImages>(4), {.batch_size = 2});
  // "built without CUDA" in a CPU-only build, "no CUDA device" in a CUDA build on this machine.
  try {
    DevicePrefetcher prefetcher(loader);
    ADD_FAILURE() << "expected nabla::Error";
  } catch (const Error& e) {
    std::string what = e.what();
    EXPECT_TRUE(what.find("built without CUDA") != std::string::npos ||
                what.find("no CUDA device") != std::string::npos)
        << what;
  }
}

}  // namespace
}  // namespace nabla::data
