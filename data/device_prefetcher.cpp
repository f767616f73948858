// DevicePrefetcher (see device_prefetcher.h). Plain C++ over nabla's stream, event and
// allocator API; the only kernel is normalize_images' fused one. Built in every configuration:
// without CUDA the constructor refuses with a clear error before any device call.
#include "nabla/data/device_prefetcher.h"

#include <chrono>
#include <deque>

#include "nabla/core/cuda/memory.h"
#include "nabla/core/cuda/runtime.h"
#include "nabla/core/cuda/stream.h"
#include "nabla/core/dispatch.h"
#include "nabla/data/cuda/gpu_jpeg.h"
#include "nabla_generated/config.h"

namespace nabla::data {

namespace {
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}
}  // namespace

struct DevicePrefetcher::Impl {
  struct Pending {
    DeviceBatch batch;
    nabla::cuda::Event ready;  // recorded on the copy stream after the normalize kernel
  };

  Impl(DataLoader& loader, PrefetchOptions options) : loader(loader), options(std::move(options)) {}

  // A deferred batch's images (DataLoaderOptions::defer_decode), decoded by nvJPEG and
  // resampled and normalized by one kernel, on the copy stream (data/cuda/gpu_jpeg.h).
  Tensor decode_on_gpu(Batch& host, const Device& device) {
    return nabla::dispatch(
        "gpu_decode", device, []() -> Tensor { NABLA_CHECK(false, "GPU decode needs a CUDA device"); },
        [&]() -> Tensor {
          // Created on first use, so a loader without defer_decode never opens nvJPEG. A
          // shared_ptr, so only this branch names the decoder's destructor (Note [One backend
          // dispatch] in core/dispatch.h).
          if (!decoder) decoder = std::make_shared<cuda::GpuJpegDecoder>(options.device);
          Tensor out = decoder->decode(host, options.normalize, copy_stream,
                                       [this](int64_t index) { return loader.dataset().describe(index); });
          const cuda::GpuDecodeCounts c = decoder->counts();
          stats.gpu_images = c.gpu_images;
          stats.cpu_images = c.worker_cpu_images + c.fallback_images;
          stats.fallback_images = c.fallback_images;
          stats.decode_backend = decoder->backend();
          return out;
        });
  }

  // Uploads and normalizes one host batch on the copy stream; returns without waiting.
  Pending upload(Batch& host) {
    NABLA_CHECK(host.input.dim() == 4 && host.input.dtype() == kUInt8,
                "DevicePrefetcher: the loader must yield (N, H, W, C) uint8 image batches (an ImageDataset "
                "without a custom collate), got input {}",
                describe(host.input));
    nabla::cuda::StreamGuard guard(copy_stream);
    const Device device = Device::cuda(options.device);
    Pending p;
    if (host.deferred) {
      p.batch.input = decode_on_gpu(host, device);
    } else {
      // (N, H, W, C) uint8: an async copy from pinned memory (copy_bytes records the pinned use,
      // so the host buffer is not recycled before the copy has read it).
      Tensor staged = host.input.to(device);
      p.batch.input = normalize_images(staged, options.normalize);  // (N, C, H, W), same stream
    }
    p.batch.target = host.target.to(device);
    p.batch.indices = std::move(host.indices);
    p.batch.epoch = host.epoch;
    p.batch.number = host.number;
    p.ready.record(copy_stream);
    // `staged` is freed here; its block is reused only by later work on the copy stream, which
    // is ordered after this kernel.
    return p;
  }

  // Tops the queue up to `depth` uploads; returns the host time spent waiting for the loader.
  double fill() {
    double waited = 0;
    while (!exhausted && static_cast<int>(queue.size()) < options.depth) {
      auto start = Clock::now();
      std::optional<Batch> host = loader.next();
      waited += seconds_since(start);
      if (!host) {
        exhausted = true;
        break;
      }
      queue.push_back(upload(*host));
    }
    return waited;
  }

  DataLoader& loader;
  PrefetchOptions options;
  nabla::cuda::Stream copy_stream;
  std::deque<Pending> queue;
  std::shared_ptr<cuda::GpuJpegDecoder> decoder;
  bool started = false;
  bool exhausted = false;
  PrefetchStats stats;
};

std::string gpu_decode_unavailable_reason() {
  if (!NABLA_HAS_CUDA) return "nabla was built without CUDA";
  if (!nabla::cuda::is_available()) return "no CUDA device is available";
  return nabla::dispatch(
      "gpu_decode", Device::cuda(0), [] { return std::string("no CUDA device"); },
      [] { return cuda::gpu_decode_unavailable_reason(); });
}

DevicePrefetcher::DevicePrefetcher(DataLoader& loader, PrefetchOptions options) {
  NABLA_CHECK(
      NABLA_HAS_CUDA,
      "DevicePrefetcher: nabla was built without CUDA, so there is no device to prefetch to; train on "
      "the CPU batches from DataLoader directly, or rebuild with NABLA_CUDA=ON");
  NABLA_CHECK(nabla::cuda::is_available(), "DevicePrefetcher: no CUDA device is available on this machine");
  NABLA_CHECK(options.device >= 0 && options.device < nabla::cuda::device_count(),
              "DevicePrefetcher: device must be in [0, {}), got {}", nabla::cuda::device_count(),
              options.device);
  NABLA_CHECK(options.depth >= 1, "DevicePrefetcher: depth must be >= 1, got {}", options.depth);
  impl_ = std::make_unique<Impl>(loader, std::move(options));
  // A pool stream, so uploads overlap the compute on the caller's stream.
  impl_->copy_stream = nabla::cuda::stream_from_pool(impl_->options.device);
}

DevicePrefetcher::~DevicePrefetcher() = default;

void DevicePrefetcher::start_epoch() {
  impl_->queue.clear();
  impl_->exhausted = false;
  impl_->started = true;
  impl_->loader.start_epoch();
}

std::optional<DeviceBatch> DevicePrefetcher::next() {
  Impl& s = *impl_;
  if (!s.started) start_epoch();
  // Keep `depth` uploads queued: the batch handed out now was queued depth-1 steps ago, so its
  // upload and normalize overlapped the compute of the steps before.
  double waited = s.fill();
  if (s.queue.empty()) return std::nullopt;
  Impl::Pending p = std::move(s.queue.front());
  s.queue.pop_front();
  // The compute stream waits on the device for the upload; the host does not wait.
  nabla::cuda::Stream compute = nabla::cuda::current_stream(s.options.device);
  p.ready.block(compute);
  nabla::cuda::record_stream(p.batch.input, compute);
  nabla::cuda::record_stream(p.batch.target, compute);
  p.batch.wait_seconds = waited;
  ++s.stats.batches;
  s.stats.wait_seconds += waited;
  s.stats.last_wait_seconds = waited;
  return std::move(p.batch);
}

PrefetchStats DevicePrefetcher::stats() const {
  return impl_->stats;
}

}  // namespace nabla::data
