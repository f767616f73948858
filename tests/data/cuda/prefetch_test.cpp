// The data path on the GPU (each case skips without a GPU): the fused normalize kernel against
// the CPU path for every output dtype and both layouts; the DevicePrefetcher hands out the same
// batches as the loader (read back on the compute stream, so the event ordering is exercised);
// steady-state prefetching allocates no new device or pinned memory.
#include <random>

#include "data/fake_datasets.h"
#include "nabla/core/cuda/memory.h"
#include "nabla/core/cuda/pinned_allocator.h"
#include "nabla/core/cuda/stream.h"
#include "nabla/data/data_loader.h"
#include "nabla/data/device_prefetcher.h"
#include "nabla/data/normalize.h"
#include "nabla/data/synthetic.h"
#include "test_util.h"

namespace nabla::data {
namespace {

using nabla::testing::all_close;

#define SKIP_WITHOUT_GPU() \
  if (!::nabla::cuda::is_available()) GTEST_SKIP() << "no CUDA device"

Tensor random_images(const Shape& nhwc, uint64_t seed) {
  Tensor t = Tensor::empty(nhwc, {.dtype = kUInt8});
  std::mt19937_64 rng(seed);
  for (int64_t i = 0; i < t.numel(); ++i) t.data_ptr<uint8_t>()[i] = static_cast<uint8_t>(1 + rng() % 255);
  return t;
}

TEST(CudaDataNormalize, FusedKernelMatchesTheCpuPathBitForBit) {
  SKIP_WITHOUT_GPU();
  const uint64_t seed = nabla::testing::test_seed();
  for (const Shape& shape : {Shape{3, 17, 13, 3}, Shape{2, 9, 31, 1}, Shape{16, 64, 48, 3}}) {
    Tensor images = random_images(shape, seed + static_cast<uint64_t>(shape[1]));
    Tensor device_images = images.to(Device::cuda());
    for (DType dtype : {kFloat32, kFloat16, kBFloat16}) {
      for (MemoryFormat format : {MemoryFormat::Contiguous, MemoryFormat::ChannelsLast}) {
        SCOPED_TRACE(shape_str(shape) + " " + std::string(dtype_name(dtype)) +
                     (format == MemoryFormat::ChannelsLast ? " NHWC" : " NCHW"));
        NormalizeOptions options{.dtype = dtype, .memory_format = format};
        if (shape[3] == 1) options.mean = {0.3f}, options.stddev = {0.35f};
        Tensor cpu = normalize_images(images, options);
        Tensor gpu = normalize_images(device_images, options);
        ASSERT_TRUE(gpu.is_cuda());
        EXPECT_EQ(gpu.sizes(), cpu.sizes());
        EXPECT_EQ(gpu.dtype(), dtype);
        EXPECT_TRUE(gpu.is_contiguous(format));
        // Same fma on the same float coefficients, then the same round-to-nearest cast.
        EXPECT_TRUE(all_close(gpu.cpu(), cpu, 0, 0));
      }
    }
  }
}

TEST(CudaDataPrefetch, DeliversTheLoadersBatchesNormalizedOnTheDevice) {
  SKIP_WITHOUT_GPU();
  const uint64_t seed = nabla::testing::test_seed();
  auto dataset = std::make_shared<fakes::FakeImages>(70);
  dataset->delay = fakes::scrambled_delays();
  DataLoaderOptions options{
      .batch_size = 8, .shuffle = true, .num_workers = 4, .pin_memory = true, .seed = seed};
  for (auto [dtype, format] :
       {std::pair{kFloat32, MemoryFormat::Contiguous}, std::pair{kBFloat16, MemoryFormat::ChannelsLast}}) {
    NormalizeOptions normalize{
        .mean = {0.4f, 0.6f}, .stddev = {0.2f, 0.3f}, .dtype = dtype, .memory_format = format};
    DataLoader reference_loader(dataset, options);
    DataLoader loader(dataset, options);
    DevicePrefetcher prefetcher(loader, {.device = 0, .depth = 3, .normalize = normalize});
    int64_t batches = 0;
    auto expected = reference_loader.begin();
    for (auto& batch : prefetcher) {
      ASSERT_NE(expected, reference_loader.end());
      EXPECT_TRUE(expected->input.is_pinned());
      EXPECT_EQ(batch.number, expected->number);
      EXPECT_EQ(batch.indices, expected->indices);
      ASSERT_TRUE(batch.input.is_cuda());
      EXPECT_TRUE(batch.input.is_contiguous(format));
      // Read back on the compute stream, which waited on the upload's event.
      EXPECT_TRUE(all_close(batch.input.cpu(), normalize_images(expected->input, normalize), 0, 0));
      EXPECT_TRUE(all_close(batch.target.cpu(), expected->target, 0, 0));
      ++expected;
      ++batches;
    }
    EXPECT_EQ(expected, reference_loader.end());
    EXPECT_EQ(batches, 9);
    EXPECT_EQ(prefetcher.stats().batches, 9);
  }
}

TEST(CudaDataPrefetch, SteadyStateAllocatesNoDeviceOrPinnedMemory) {
  SKIP_WITHOUT_GPU();
  // The host runs up to kSyncEvery steps ahead, so the set of blocks in flight peaks at a moment
  // that depends on timing (one cudaMalloc after step 100 of 400 was seen on the H200); the second
  // half of the run must not allocate from the device at all.
  constexpr int64_t kSteps = 600, kSyncEvery = 10, kWarmUp = 300;
  auto dataset = std::make_shared<SyntheticDataset>(
      SyntheticOptions{.size = 32 * kSteps, .shape = {.height = 64, .width = 64, .channels = 3}, .seed = 3});
  DataLoader loader(dataset,
                    {.batch_size = 32, .shuffle = true, .num_workers = 4, .prefetch = 4, .pin_memory = true});
  DevicePrefetcher prefetcher(
      loader, {.depth = 2, .normalize = {.dtype = kBFloat16, .memory_format = MemoryFormat::ChannelsLast}});
  nabla::cuda::AllocatorCounts warm{};
  nabla::cuda::PinnedStats warm_pinned{};
  int64_t step = 0;
  double checksum = 0;
  for (auto& batch : prefetcher) {
    // A stand-in for the training step, on the compute stream. Reading the loss every few steps
    // (as a training loop logs it) bounds how far the host runs ahead of the device, so the set
    // of blocks in flight has a steady high-water mark that warm-up reaches.
    Tensor loss = batch.input.to(kFloat32).mean();
    if (++step % kSyncEvery == 0) checksum += loss.item<double>();
    if (step == kWarmUp) {
      warm = nabla::cuda::allocator_counts();
      warm_pinned = nabla::cuda::pinned_stats();
    }
  }
  EXPECT_EQ(step, kSteps);
  nabla::cuda::AllocatorCounts end = nabla::cuda::allocator_counts();
  EXPECT_EQ(end.device_allocations, warm.device_allocations) << "no cudaMalloc after warm-up";
  EXPECT_GT(end.allocations, warm.allocations) << "the steps did allocate, from the cache";
  EXPECT_EQ(nabla::cuda::pinned_stats().host_alloc_calls, warm_pinned.host_alloc_calls)
      << "no cudaHostAlloc after warm-up";
  EXPECT_TRUE(std::isfinite(checksum));
  EXPECT_NE(checksum, 0.0);
  EXPECT_EQ(prefetcher.stats().batches, kSteps);
}

TEST(CudaDataPrefetch, RejectsBatchesThatAreNotUint8Images) {
  SKIP_WITHOUT_GPU();
  DataLoader loader(std::make_shared<fakes::FakeVectors>(8), {.batch_size = 4});
  DevicePrefetcher prefetcher(loader);
  EXPECT_NABLA_ERROR(prefetcher.next(), "(N, H, W, C) uint8 image batches");
}

}  // namespace
}  // namespace nabla::data
