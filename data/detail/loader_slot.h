// Internal (data/ only). One in-flight batch of the DataLoader, and the loading of one sample
// into it. The Engine (data_loader.cpp) owns a ring of these; workers write disjoint rows of a
// slot without the lock, and only the bookkeeping (done, error) is under the engine's mutex.
#pragma once

#include <cstdint>
#include <exception>
#include <memory>
#include <vector>

#include "nabla/data/buffer_pool.h"
#include "nabla/data/data_loader.h"

namespace nabla::data {

struct SlotSetup {
  ImageDataset* image_dataset = nullptr;  // the fast path when set
  BufferPool* pool = nullptr;
  int64_t batch_size = 1;
  bool pin_memory = false;
  bool defer_decode = false;
};

struct Slot {
  int64_t number = -1;  // batch number in the epoch; -1 when free
  int64_t count = 0;    // samples in the batch
  int64_t done = 0;     // samples loaded (or failed)
  bool complete = false;
  std::exception_ptr error;  // the first failure in row order
  int64_t error_row = 0;

  ImageShape shape;                 // fast path: every image's shape
  std::shared_ptr<Storage> pixels;  // fast path: (batch_size, H, W, C) uint8 buffer
  Tensor labels;                    // fast path: (count) int64
  std::vector<Example> examples;    // generic path, one per row
  Example collated;                 // generic path, after finish()
  std::vector<int64_t> indices;     // dataset index per row
  // defer_decode: one entry per row; reused by the slot's next batch when the last one was
  // dropped by then (its file buffers keep their capacity), else made afresh.
  std::shared_ptr<std::vector<DeferredImage>> deferred;

  // Prepares the slot for batch `number` of `count` samples (allocates the batch buffers).
  void open(int64_t number, int64_t count, const SlotSetup& setup);
  // After the last sample: collates the generic path (errors become the slot's error).
  void finish(const CollateFn& collate, bool pin_memory);
  // Hands the batch out and frees the slot.
  Batch take();
};

struct SampleLoad {
  std::exception_ptr error;  // set when the sample (and every stand-in) failed
  int64_t skipped = 0;       // bad samples replaced by a stand-in
};

// Loads dataset sample context.index into row `row` of `slot`. With OnBadSample::skip a bad
// sample is counted, logged and replaced by the next index that loads (timm's ImageDataset does
// the same), so the batch keeps its shape and the choice is the same on every run.
SampleLoad load_sample(Dataset& dataset, ImageDataset* image_dataset, OnBadSample policy, Slot& slot,
                       int64_t row, const SampleContext& context);

}  // namespace nabla::data
