// Public header. DevicePrefetcher: uploads the loader's next batches to a GPU while the current
// step computes, and normalizes them there.
//
//   nabla::data::DevicePrefetcher prefetch(loader, {.device = 0, .depth = 2,
//       .normalize = {.dtype = nabla::kBFloat16, .memory_format = nabla::MemoryFormat::ChannelsLast}});
//   for (auto& batch : prefetch) step(batch.input, batch.target);   // (N, C, H, W) on cuda:0
//
// For each batch: on a copy stream, an asynchronous upload of the pinned uint8 (N, H, W, C)
// buffer, then ONE kernel (data/normalize.h) writes the normalized (N, C, H, W) tensor; an event
// recorded there is waited on by the compute stream (the caller's current stream) when the batch
// is handed out, so the host never waits for the device. Output memory comes from the caching
// allocator on the copy stream and is record_stream()ed onto the compute stream, so steady state
// does no cudaMalloc. The loader must produce ImageDataset batches (uint8 NHWC), ideally with
// pin_memory=true (pageable buffers work but their upload is synchronous).
//
// A loader with defer_decode leaves its JPEGs undecoded: then nvJPEG decodes them on the copy
// stream and one kernel crops, resizes, flips and normalizes the batch (Note [GPU decode] in
// docs/design/data.md). Without nvJPEG on the machine the same batch is decoded on the CPU here,
// after one logged line.
//
// A build without CUDA, or a machine without a GPU, gets a clear error from the constructor.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "nabla/data/data_loader.h"
#include "nabla/data/normalize.h"

namespace nabla::data {

struct PrefetchOptions {
  int device = 0;
  int depth = 2;  // batches uploaded ahead of the one being used (>= 1)
  NormalizeOptions normalize;
};

// A batch on the device, ready for the compute stream.
struct DeviceBatch {
  Tensor input;                  // (N, C, H, W) normalized, options.normalize.dtype and layout
  Tensor target;                 // (N) int64
  std::vector<int64_t> indices;  // dataset indices, as in Batch
  int64_t epoch = 0;
  int64_t number = 0;
  double wait_seconds = 0;  // host time next() blocked on the loader for this step
};

struct PrefetchStats {
  int64_t batches = 0;
  double wait_seconds = 0;  // total host time blocked on the loader
  double last_wait_seconds = 0;
  // A loader with defer_decode: images nvJPEG decoded, images decoded on the CPU (by the workers,
  // or here because nvJPEG refused them: fallback_images), and the decoder used ("hardware",
  // "GPU hybrid", or "CPU (why)").
  int64_t gpu_images = 0;
  int64_t cpu_images = 0;
  int64_t fallback_images = 0;
  std::string decode_backend;
};

// Why JPEGs cannot be decoded on the GPU here ("" when they can): a build without CUDA, no
// device, or no nvJPEG library (data/cuda/nvjpeg.h says where it is looked for).
std::string gpu_decode_unavailable_reason();

class DevicePrefetcher {
 public:
  // The loader must outlive the prefetcher; the prefetcher drives its passes.
  DevicePrefetcher(DataLoader& loader, PrefetchOptions options = {});
  ~DevicePrefetcher();
  DevicePrefetcher(const DevicePrefetcher&) = delete;
  DevicePrefetcher& operator=(const DevicePrefetcher&) = delete;

  // Starts a pass over the loader's next epoch (loader.start_epoch()) and queues the first uploads.
  void start_epoch();
  // The next batch, its upload ordered before work later queued on the current stream; nothing
  // at the end of the pass. Starts a pass when none is running.
  std::optional<DeviceBatch> next();
  PrefetchStats stats() const;

  class Iterator {
   public:
    Iterator() = default;
    explicit Iterator(DevicePrefetcher* owner) : owner_(owner) { current_ = owner_->next(); }
    DeviceBatch& operator*() { return *current_; }
    DeviceBatch* operator->() { return &*current_; }
    Iterator& operator++() {
      current_.reset();  // the previous batch's device memory can be reused at once
      current_ = owner_->next();
      return *this;
    }
    bool operator==(const Iterator& other) const { return !current_ && !other.current_; }

   private:
    DevicePrefetcher* owner_ = nullptr;
    std::optional<DeviceBatch> current_;
  };
  Iterator begin() {
    start_epoch();
    return Iterator(this);
  }
  Iterator end() { return Iterator(); }

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace nabla::data
