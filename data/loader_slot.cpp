// Slot and load_sample (see loader_slot.h).
#include "nabla/data/detail/loader_slot.h"

#include <atomic>

#include <fmt/format.h>

#include "nabla/core/logging.h"
#include "nabla/data/error.h"

namespace nabla::data {

namespace {

// How many following indices a bad sample may try before the loader gives up: a run of bad
// files this long is a broken dataset, not a few corrupt images.
constexpr int64_t kMaxStandIns = 16;

// Any failure becomes a DataError naming the sample; a DataError from the dataset is kept as is.
std::exception_ptr as_data_error(std::exception_ptr error, const Dataset& dataset, int64_t index) {
  try {
    std::rethrow_exception(error);
  } catch (const DataError&) {
    return error;
  } catch (const std::exception& e) {
    return std::make_exception_ptr(DataError(index, dataset.describe(index), e.what()));
  } catch (...) {
    return std::make_exception_ptr(DataError(index, dataset.describe(index), "unknown exception"));
  }
}

Tensor contiguous_tensor(std::shared_ptr<Storage> storage, const Shape& sizes, DType dtype) {
  return Tensor(std::make_shared<TensorImpl>(std::move(storage), 0, sizes, contiguous_strides(sizes), dtype));
}

// Loads `index` into the row; throws whatever the dataset throws.
void load_one(Dataset& dataset, ImageDataset* image_dataset, Slot& slot, int64_t row,
              const SampleContext& context) {
  if (image_dataset) {
    auto bytes = static_cast<size_t>(slot.shape.bytes());
    auto* base = static_cast<uint8_t*>(slot.pixels->data()) + static_cast<size_t>(row) * bytes;
    const std::span<uint8_t> pixels(base, bytes);
    int64_t label = slot.deferred
                        ? image_dataset->load_deferred(
                              context.index, (*slot.deferred)[static_cast<size_t>(row)], pixels, context)
                        : image_dataset->load_into(context.index, pixels, context);
    slot.labels.data_ptr<int64_t>()[row] = label;
  } else {
    slot.examples[static_cast<size_t>(row)] = dataset.get(context.index, context);
  }
  slot.indices[static_cast<size_t>(row)] = context.index;
}

}  // namespace

void Slot::open(int64_t batch_number, int64_t sample_count, const SlotSetup& setup) {
  number = batch_number;
  count = sample_count;
  done = 0;
  complete = false;
  error = nullptr;
  error_row = 0;
  indices.assign(static_cast<size_t>(count), -1);
  if (setup.image_dataset) {
    shape = setup.image_dataset->image_shape();
    // Full batch_size even for the short last batch, so the pool recycles one buffer size.
    pixels = setup.pool->acquire(static_cast<size_t>(setup.batch_size * shape.bytes()));
    labels = Tensor::empty({count}, {.dtype = kInt64, .pinned_memory = setup.pin_memory});
    if (!setup.defer_decode) {
      deferred.reset();
    } else {
      // Reused once the batch that carried it is gone (its file buffers keep their capacity); a
      // batch still held (the user's, a prefetcher's queue) keeps its vector and this slot
      // takes a fresh one. The fence orders the last holder's reads before our writes.
      if (!deferred || deferred.use_count() > 1) {
        deferred = std::make_shared<std::vector<DeferredImage>>();
      } else {
        std::atomic_thread_fence(std::memory_order_acquire);
      }
      deferred->resize(static_cast<size_t>(count));
    }
  } else {
    examples.assign(static_cast<size_t>(count), Example{});
  }
}

void Slot::finish(const CollateFn& collate, bool pin_memory) {
  if (pixels || error) return;  // fast path: already batched in place; or nothing to collate
  try {
    collated = collate ? collate(examples) : stack_collate(examples);
    if (pin_memory) {
      collated.input = collated.input.pin_memory();
      collated.target = collated.target.pin_memory();
    }
  } catch (const std::exception& e) {
    // Not one sample's fault: name the batch by its first sample.
    error = std::make_exception_ptr(DataError(indices.empty() ? -1 : indices.front(),
                                              fmt::format("batch {}", number),
                                              fmt::format("collate failed: {}", e.what())));
  } catch (...) {
    error = std::make_exception_ptr(DataError(indices.empty() ? -1 : indices.front(),
                                              fmt::format("batch {}", number),
                                              "collate failed: unknown exception"));
  }
  examples.clear();
}

Batch Slot::take() {
  Batch batch;
  if (pixels) {
    batch.input =
        contiguous_tensor(std::move(pixels), {count, shape.height, shape.width, shape.channels}, kUInt8);
    batch.target = std::move(labels);
    batch.deferred = deferred;
  } else {
    batch.input = std::move(collated.input);
    batch.target = std::move(collated.target);
  }
  batch.indices = std::move(indices);
  pixels.reset();
  labels = Tensor();
  collated = Example{};
  examples.clear();
  number = -1;
  complete = false;
  return batch;
}

SampleLoad load_sample(Dataset& dataset, ImageDataset* image_dataset, OnBadSample policy, Slot& slot,
                       int64_t row, const SampleContext& context) {
  SampleLoad result;
  const int64_t n = dataset.size();
  SampleContext attempt = context;
  for (int64_t k = 0;; ++k) {
    try {
      load_one(dataset, image_dataset, slot, row, attempt);
      return result;
    } catch (...) {
      auto error = as_data_error(std::current_exception(), dataset, attempt.index);
      if (policy == OnBadSample::error) {
        result.error = error;
        return result;
      }
      std::string why;
      try {
        std::rethrow_exception(error);
      } catch (const std::exception& e) {
        why = e.what();
      }
      ++result.skipped;
      if (k + 1 >= kMaxStandIns || k + 1 >= n) {
        result.error = std::make_exception_ptr(DataError(
            context.index, dataset.describe(context.index),
            fmt::format(
                "on_bad_sample=skip: this sample and the {} after it all failed to load, which looks like "
                "a broken dataset rather than a few bad files; last error: {}",
                k, why)));
        return result;
      }
      attempt.index = (context.index + k + 1) % n;
      NABLA_LOG_WARN("DataLoader: skipped bad {}; loading sample {} in its place", why, attempt.index);
    }
  }
}

}  // namespace nabla::data
