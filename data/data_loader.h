// Public header. DataLoader: batches from a Dataset, loaded by worker threads, in sampler order.
//
//   auto loader = nabla::data::DataLoader(dataset, {.batch_size = 256, .shuffle = true,
//                                                   .num_workers = 16, .pin_memory = true});
//   for (int64_t epoch = 0; epoch < epochs; ++epoch) {
//     loader.set_epoch(epoch);            // optional: each pass otherwise takes the next epoch
//     for (auto& batch : loader) train_step(batch.input, batch.target);
//   }
//
// An ImageDataset takes the fast path: workers write each image straight into its slot of a
// uint8 (N, H, W, C) batch buffer from a recycled pool (pinned when pin_memory), and labels go to
// an int64 (N) tensor. Any other dataset (or a custom collate) goes through get() and collate.
// The design (window of in-flight batches, ordering, shutdown, bad samples) is in
// docs/design/data.md, "Note [Loader window]".
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <vector>

#include "nabla/data/buffer_pool.h"
#include "nabla/data/dataset.h"
#include "nabla/data/image/deferred_image.h"
#include "nabla/data/sampler.h"

namespace nabla::data {

// One batch, on the CPU.
struct Batch {
  Tensor input;                  // (N, H, W, C) uint8 for an ImageDataset; collated inputs otherwise
  Tensor target;                 // (N) int64 labels; collated targets otherwise
  std::vector<int64_t> indices;  // the dataset index of each row (a skipped sample's stand-in shows here)
  // DataLoaderOptions::defer_decode: one entry per row. A row whose entry is on_gpu is left for the
  // GPU decoder (DevicePrefetcher) and its pixels in `input` are not written; the others are.
  std::shared_ptr<const std::vector<DeferredImage>> deferred;
  int64_t epoch = 0;
  int64_t number = 0;       // position of the batch in its epoch
  double wait_seconds = 0;  // how long the caller blocked in next() for this batch
};

// Turns a batch's examples (in order) into one Example. The default stacks inputs and targets.
using CollateFn = std::function<Example(std::span<const Example>)>;
// The default collate: stacks each field along a new first dimension; every example must have
// the same shapes and dtypes (a mismatch is an error naming the two examples).
Example stack_collate(std::span<const Example> examples);

struct DataLoaderOptions {
  int64_t batch_size = 1;
  bool shuffle = false;     // RandomSampler(seed) instead of SequentialSampler (if no sampler)
  bool drop_last = false;   // drop the last, short batch of an epoch
  int num_workers = 0;      // loader threads; 0 loads in the calling thread inside next()
  int prefetch = 2;         // batches in flight at most (being loaded or ready); bounds memory
  bool pin_memory = false;  // page-locked batch buffers, for asynchronous uploads
  // ImageDataset only: workers read each file and plan its crop and flip, and leave the JPEGs
  // the GPU decoder takes to it (DevicePrefetcher decodes them with nvJPEG); the rest they
  // decode as usual (ImageDataset::load_deferred). Such batches need a DevicePrefetcher over the
  // loader, which decodes the rest on the GPU (data/device_prefetcher.h): their GPU rows' pixels
  // are not written. Square RGB images only.
  bool defer_decode = false;
  uint64_t seed = 0;  // shuffling and per-sample augmentation (SampleContext::seed)
  OnBadSample on_bad_sample = OnBadSample::error;
  CollateFn collate = {};                      // set: the generic path even for an ImageDataset
  std::shared_ptr<Sampler> sampler = nullptr;  // set: overrides shuffle (e.g. a DistributedSampler)
};

struct LoaderStats {
  int64_t batches = 0;  // delivered since construction
  int64_t samples = 0;
  int64_t skipped = 0;      // bad samples replaced (on_bad_sample = skip)
  double wait_seconds = 0;  // total time callers blocked in next()
  double last_wait_seconds = 0;
  double max_wait_seconds = 0;
  int64_t max_in_flight = 0;  // most batches holding a buffer and not yet delivered
};

class DataLoader {
 public:
  DataLoader(std::shared_ptr<Dataset> dataset, DataLoaderOptions options);
  ~DataLoader();  // stops and joins the workers, wherever the epoch is
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  // The epoch of the next pass (begin() or start_epoch()). Without a call, passes count up.
  void set_epoch(int64_t epoch);
  // Batches per epoch.
  int64_t size() const;
  const DataLoaderOptions& options() const { return options_; }
  Dataset& dataset() const { return *dataset_; }
  LoaderStats stats() const;
  BufferPoolStats buffer_stats() const;

  // The explicit form of the range-for: start_epoch() (stopping any pass in progress), then
  // next() until it returns nothing. next() rethrows a worker's DataError; the pass is then over.
  void start_epoch();
  std::optional<Batch> next();
  // Stops the pass in progress: workers finish the sample in hand, then exit and are joined.
  void stop();

  class Iterator {
   public:
    using value_type = Batch;
    using difference_type = std::ptrdiff_t;
    Iterator() = default;
    explicit Iterator(DataLoader* loader) : loader_(loader) { advance(); }
    Batch& operator*() { return *current_; }
    Batch* operator->() { return &*current_; }
    Iterator& operator++() {
      advance();
      return *this;
    }
    bool operator==(const Iterator& other) const { return !current_ && !other.current_; }

   private:
    // Drops the previous batch before waiting for the next, so its buffer is free to recycle.
    void advance() {
      current_.reset();
      current_ = loader_->next();
    }
    DataLoader* loader_ = nullptr;
    std::optional<Batch> current_;
  };
  // Starts a pass over the next epoch; breaking out of the loop early is fine (the next begin()
  // or the destructor stops the rest).
  Iterator begin() {
    start_epoch();
    return Iterator(this);
  }
  Iterator end() { return Iterator(); }

  struct Engine;  // the worker pool of one pass (data_loader.cpp)

 private:
  std::shared_ptr<Dataset> dataset_;
  ImageDataset* image_dataset_ = nullptr;  // set when the fast path applies
  DataLoaderOptions options_;
  std::shared_ptr<Sampler> sampler_;
  BufferPool pool_;
  int64_t next_epoch_ = 0;
  std::unique_ptr<Engine> engine_;
  mutable std::mutex stats_mutex_;  // workers count skips while the caller reads stats
  LoaderStats stats_;
};

}  // namespace nabla::data
