// GPU JPEG decoding (Note [GPU decode] in docs/design/data.md; each case skips without a GPU):
// the resample + normalize kernel against the CPU resampler and normalize_images, bit for bit, on
// random images and plans; and a deferred loader through the DevicePrefetcher against the CPU
// path at full size on JPEGs made here with libjpeg-turbo: nvJPEG's pixels within its IDCT and
// chroma differences, and the files it does not take (progressive, PNG) decoded on the CPU, equal.
#include <turbojpeg.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>

#include "data/image_test_util.h"
#include "nabla/core/cuda/stream.h"
#include "nabla/data/cuda/gpu_jpeg.h"
#include "nabla/data/cuda/resample_cuda.h"
#include "nabla/data/data_loader.h"
#include "nabla/data/device_prefetcher.h"
#include "nabla/data/image/image_folder.h"
#include "nabla/data/image/pipeline.h"
#include "nabla/data/normalize.h"
#include "test_util.h"

namespace nabla::data {
namespace {

#define SKIP_WITHOUT_GPU() \
  if (!::nabla::cuda::is_available()) GTEST_SKIP() << "no CUDA device"

// A smooth random RGB image (sums of a few random waves, plus noise), like a photo's spectrum.
std::vector<uint8_t> smooth_image(int height, int width, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::vector<uint8_t> pixels(static_cast<size_t>(height) * width * 3);
  double fx[3][3], fy[3][3], phase[3][3];
  for (auto* table : {fx, fy, phase}) {
    for (int c = 0; c < 3; ++c)
      for (int k = 0; k < 3; ++k) table[c][k] = u(rng) * 0.08;
  }
  for (int y = 0; y < height; ++y) {
    for (int x = 0; x < width; ++x) {
      for (int c = 0; c < 3; ++c) {
        double v = 128;
        for (int k = 0; k < 3; ++k) v += 40 * std::sin(fx[c][k] * x + fy[c][k] * y + phase[c][k] * 100);
        v += (u(rng) - 0.5) * 12;
        pixels[(static_cast<size_t>(y) * width + x) * 3 + c] =
            static_cast<uint8_t>(std::clamp(v, 1.0, 255.0));
      }
    }
  }
  return pixels;
}

// The image as a JPEG from libjpeg-turbo: 4:2:0 or 4:4:4 colour, grayscale, or progressive.
std::vector<uint8_t> encode_jpeg(const std::vector<uint8_t>& rgb, int height, int width, int subsampling,
                                 bool progressive) {
  tjhandle handle = tjInitCompress();
  unsigned char* out = nullptr;
  unsigned long size = 0;
  const int flags = TJFLAG_ACCURATEDCT | (progressive ? TJFLAG_PROGRESSIVE : 0);
  std::vector<uint8_t> gray;
  const uint8_t* source = rgb.data();
  int format = TJPF_RGB;
  if (subsampling == TJSAMP_GRAY) {
    for (size_t p = 0; p < rgb.size(); p += 3)
      gray.push_back(static_cast<uint8_t>((rgb[p] + rgb[p + 1] + rgb[p + 2]) / 3));
    source = gray.data();
    format = TJPF_GRAY;
  }
  const int status =
      tjCompress2(handle, source, width, 0, height, format, &out, &size, subsampling, 92, flags);
  EXPECT_EQ(status, 0) << tjGetErrorStr2(handle);
  std::vector<uint8_t> bytes(out, out + size);
  tjFree(out);
  tjDestroy(handle);
  return bytes;
}

// Note [Bilinear geometry] on the GPU: the kernel's crop, resize and flip of a decoded image,
// normalized, equal the CPU resampler's bytes normalized by normalize_images, for every dtype and
// layout, on random images, crops and flips (one batch mixes sizes, as decoded images do).
TEST(CudaGpuDecode, ResampleKernelMatchesTheCpuResamplerBitForBit) {
  SKIP_WITHOUT_GPU();
  const uint64_t seed = nabla::testing::test_seed();
  const int64_t size = 40;
  const std::vector<std::pair<int, int>> sizes = {{173, 259}, {40, 40}, {31, 97}, {500, 333}, {64, 20}};
  const int64_t n = static_cast<int64_t>(sizes.size());
  std::vector<Tensor> sources;
  std::vector<cuda::ResampleSource> table(sizes.size());
  std::vector<detail::Tap> taps;
  Tensor expected_bytes = Tensor::empty({n, size, size, 3}, {.dtype = kUInt8});
  for (int64_t i = 0; i < n; ++i) {
    const auto [h, w] = sizes[static_cast<size_t>(i)];
    std::vector<uint8_t> pixels = smooth_image(h, w, seed + static_cast<uint64_t>(i));
    SampleRandom random(SampleContext{.seed = seed, .index = i});
    const CropBox box = random_resized_crop_box(h, w, {}, random);
    const bool flip = random.bernoulli(0.5) || i == 0;
    const ResampleMap map =
        i == 3 ? resize_center_crop_map(h, w, 48, size, size) : crop_resize_map(box, size, size);
    resample_bilinear(
        pixels, h, w, 3, map,
        {expected_bytes.data_ptr<uint8_t>() + i * size * size * 3, static_cast<size_t>(size * size * 3)},
        size, size, flip);
    Tensor host = Tensor::empty({static_cast<int64_t>(pixels.size())}, {.dtype = kUInt8});
    std::copy(pixels.begin(), pixels.end(), host.data_ptr<uint8_t>());
    sources.push_back(host.to(Device::cuda()));
    table[static_cast<size_t>(i)] = {.pixels = sources.back().data_ptr<uint8_t>(),
                                     .pitch = int64_t{w} * 3,
                                     .taps = static_cast<int32_t>(taps.size()),
                                     .flip = flip ? 1 : 0};
    for (const auto& axis : {detail::bilinear_taps(map.y, size, h), detail::bilinear_taps(map.x, size, w)})
      taps.insert(taps.end(), axis.begin(), axis.end());
  }
  auto upload = [](const void* data, size_t bytes) {
    Tensor host = Tensor::empty({static_cast<int64_t>(bytes)}, {.dtype = kUInt8});
    std::memcpy(host.data_ptr(), data, bytes);
    return host.to(Device::cuda());
  };
  const Tensor table_device = upload(table.data(), table.size() * sizeof(cuda::ResampleSource));
  const Tensor taps_device = upload(taps.data(), taps.size() * sizeof(detail::Tap));
  for (DType dtype : {kFloat32, kFloat16, kBFloat16}) {
    for (MemoryFormat format : {MemoryFormat::Contiguous, MemoryFormat::ChannelsLast}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) +
                   (format == MemoryFormat::ChannelsLast ? " NHWC" : " NCHW"));
      const NormalizeOptions options{.dtype = dtype, .memory_format = format};
      Tensor out = Tensor::empty({n, 3, size, size},
                                 {.dtype = dtype, .device = Device::cuda(), .memory_format = format});
      cuda::launch_resample_normalize(static_cast<const cuda::ResampleSource*>(table_device.data_ptr()),
                                      static_cast<const detail::Tap*>(taps_device.data_ptr()), n, size,
                                      out.data_ptr(), dtype, format == MemoryFormat::ChannelsLast,
                                      normalize_coefficients(options, 3), nabla::cuda::current_stream());
      EXPECT_TRUE(nabla::testing::all_close(out.cpu(), normalize_images(expected_bytes, options), 0, 0));
    }
  }
}

// The bytes (N, S, S, 3) behind a float32 NCHW batch normalized with ImageNet's statistics.
std::vector<double> as_bytes(const Tensor& nchw) {
  const Tensor t = nchw.cpu().contiguous();
  const float mean[3] = {0.485f, 0.456f, 0.406f}, stddev[3] = {0.229f, 0.224f, 0.225f};
  const int64_t plane = t.size(2) * t.size(3);
  std::vector<double> bytes(static_cast<size_t>(t.numel()));
  for (int64_t k = 0; k < t.numel(); ++k) {
    const int64_t c = (k / plane) % 3;
    bytes[static_cast<size_t>(k)] = (t.data_ptr<float>()[k] * stddev[c] + mean[c]) * 255.0;
  }
  return bytes;
}

// A deferred loader through the prefetcher against the CPU path at full size (the same crops
// and flips): nvJPEG's images within its IDCT and chroma upsampling differences from
// libjpeg-turbo's (the largest difference per image is printed), the progressive JPEG and the PNG
// decoded on the CPU and equal; the counts say which was which.
TEST(CudaGpuDecode, NvjpegBatchesMatchTheCpuPathWithinTheDecodersDifferences) {
  SKIP_WITHOUT_GPU();
  if (const std::string why = cuda::gpu_decode_unavailable_reason(); !why.empty()) GTEST_SKIP() << why;
  nabla::testing::ScratchDir dir;
  const uint64_t seed = nabla::testing::test_seed();
  struct File {
    const char* name;
    int height, width, subsampling;
    bool progressive;
  };
  const std::vector<File> files = {
      {"a/420.jpg", 375, 500, TJSAMP_420, false},        {"a/444.jpg", 333, 250, TJSAMP_444, false},
      {"a/422_odd.jpg", 199, 301, TJSAMP_422, false},    {"b/gray.jpg", 240, 320, TJSAMP_GRAY, false},
      {"b/progressive.jpg", 300, 400, TJSAMP_420, true}, {"c/big.jpg", 1200, 1600, TJSAMP_420, false}};
  for (size_t k = 0; k < files.size(); ++k) {
    const File& f = files[k];
    nabla::testing::write_bytes(dir / f.name, encode_jpeg(smooth_image(f.height, f.width, seed + k), f.height,
                                                          f.width, f.subsampling, f.progressive));
  }
  const int64_t size = 64;
  auto folder =
      std::make_shared<ImageFolder>(dir.path(), imagenet_train_transform(size),
                                    ImageFolderOptions{.decode = {.dct_scaling = false}, .index = {}});
  const NormalizeOptions normalize{.dtype = kFloat32};
  for (int epoch = 0; epoch < 2; ++epoch) {
    DataLoader reference(
        folder, {.batch_size = 4, .shuffle = true, .num_workers = 2, .pin_memory = true, .seed = seed});
    DataLoader deferred(folder, {.batch_size = 4,
                                 .shuffle = true,
                                 .num_workers = 2,
                                 .pin_memory = true,
                                 .defer_decode = true,
                                 .seed = seed});
    reference.set_epoch(epoch);
    deferred.set_epoch(epoch);
    DevicePrefetcher expected(reference, {.depth = 2, .normalize = normalize});
    DevicePrefetcher got(deferred, {.depth = 2, .normalize = normalize});
    auto e = expected.begin();
    for (auto& batch : got) {
      ASSERT_NE(e, expected.end());
      ASSERT_EQ(batch.indices, e->indices);
      const std::vector<double> a = as_bytes(batch.input), b = as_bytes(e->input);
      const size_t per_image = static_cast<size_t>(3 * size * size);
      for (size_t r = 0; r < batch.indices.size(); ++r) {
        const std::string path = folder->path(batch.indices[r]);
        double max = 0, sum = 0;
        for (size_t k = r * per_image; k < (r + 1) * per_image; ++k) {
          const double d = std::abs(a[k] - b[k]);
          max = std::max(max, d);
          sum += d;
        }
        const double mean = sum / static_cast<double>(per_image);
        const bool on_cpu = path.ends_with("progressive.jpg");
        std::printf("  %-24s epoch %d: max |difference| %.2f, mean %.3f (%s)\n",
                    std::filesystem::path(path).filename().c_str(), epoch, max, mean,
                    on_cpu ? "CPU" : "nvJPEG");
        if (on_cpu) {
          EXPECT_LT(max, 1e-3) << path;  // the same decoder and resampler
        } else {
          EXPECT_LT(mean, 1.5) << path;  // IDCT and chroma upsampling differ; the geometry does not
          EXPECT_LT(max, 48) << path;
        }
      }
      ++e;
    }
    EXPECT_EQ(e, expected.end());
    const PrefetchStats stats = got.stats();
    EXPECT_EQ(stats.gpu_images, 5) << stats.decode_backend;
    EXPECT_EQ(stats.cpu_images, 1);
    EXPECT_EQ(stats.fallback_images, 0);
    std::printf("  decoder: %s\n", stats.decode_backend.c_str());
  }
}

}  // namespace
}  // namespace nabla::data
