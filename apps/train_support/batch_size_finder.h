// find_batch_size: `--batch-size auto`. Before training starts, finds the largest batch whose
// training step fits in memory, by running trial steps: the batch doubles from `start` until a
// step runs out of memory (or passes `max_batch`), then a binary search between the last batch
// that fitted and the first that did not narrows it down.
//
// Batches of 8 and more are multiples of 8: fp16/bf16 tensor-core kernels (cuDNN, cuBLAS) want
// channel and batch dimensions that are multiples of 8, and a batch of 8k+3 would buy little
// memory and lose speed. Below 8 every size is a candidate. The search assumes that a batch fits
// whenever a larger one does (memory grows with the batch).
//
//   auto found = find_batch_size([&](int64_t b) { one_training_step(b); },
//                                {.max_batch = 4096, .device = device});
//   NABLA_LOG_INFO("{}", found.report());
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "nabla/core/device.h"

namespace nabla::train_support {

struct BatchSizeTrial {
  int64_t batch = 0;
  bool fits = false;
};

struct BatchSizeSearch {
  int64_t batch = 0;                   // the largest batch that fitted
  std::vector<BatchSizeTrial> trials;  // in the order they ran
  bool hit_max = false;                // the search stopped at max_batch, not at memory
  std::string report() const;          // one line: the batch found and the trials
};

struct BatchSizeSearchOptions {
  int64_t max_batch = 0;          // required: the largest batch worth trying (e.g. the dataset size)
  int64_t start = 1;              // the first trial (rounded down to a candidate)
  Device device = Device::cpu();  // on CUDA the allocator's cache is freed after every trial
};

// The largest fitting candidate batch <= max_batch. `trial(batch)` runs one training step (forward,
// backward, optimizer step on throwaway state) and throws nabla::OutOfMemoryError when it does not
// fit; any other exception passes through. Throws OutOfMemoryError when not even a batch of 1
// fits.
BatchSizeSearch find_batch_size(const std::function<void(int64_t batch)>& trial,
                                const BatchSizeSearchOptions& options);

// The batch sizes the search may return: 1..7, then multiples of 8. For tests.
bool is_batch_size_candidate(int64_t batch);

}  // namespace nabla::train_support
