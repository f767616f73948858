// Public header. Dataset: random access to examples, the first stage of the data path
// (Dataset -> Sampler -> DataLoader; see docs/design/data.md).
//
// Two ways to produce a sample:
//   - `get(i)` returns an Example of any tensors, for small or non-image datasets;
//   - an ImageDataset also writes a fixed-size uint8 HWC image straight into the slot of a
//     pinned batch buffer (`load_into`), so the loader never copies a decoded image again.
//
// Randomness (crops, flips) comes from SampleContext, a Philox stream keyed by (seed, epoch,
// index), so a sample's augmentation does not depend on which worker thread drew it.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "nabla/core/philox.h"
#include "nabla/core/tensor.h"

namespace nabla::data {

// One training example: the inputs and the targets, as tensors on the CPU.
struct Example {
  Tensor input;
  Tensor target;
};

// What to do with a sample that cannot be read (corrupt, truncated, unsupported file).
enum class OnBadSample {
  error,  // raise a DataError naming the sample's index and file
  skip,   // count it, log it, and fill its place with the next good sample
};

// The per-sample random stream and identity handed to a dataset by the loader.
struct SampleContext {
  uint64_t seed = 0;  // the loader's seed
  int64_t epoch = 0;  // the sampler's epoch
  int64_t index = 0;  // the dataset index being loaded
  int worker = 0;     // which worker thread (for logging only, never for randomness)
};

// Abstract random-access dataset. get() and load_into() are called from several worker threads
// at once, so implementations must be safe for concurrent calls (read-only state, or locked).
class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;
  virtual Example get(int64_t index, const SampleContext& context) = 0;
  Example get(int64_t index) { return get(index, SampleContext{.index = index}); }
  // A human-readable name of a sample's source (a file path, "idx:train-images:42"), for errors.
  virtual std::string describe(int64_t index) const { return "sample " + std::to_string(index); }
};

// The layout of one image an ImageDataset produces: uint8, height x width x channels.
struct ImageShape {
  int64_t height = 0;
  int64_t width = 0;
  int64_t channels = 3;
  int64_t bytes() const { return height * width * channels; }
};

struct DeferredImage;  // an image left for the GPU decoder (image/deferred_image.h)

// A dataset of fixed-size uint8 HWC images and integer labels. The loader batches these into a
// pinned uint8 NHWC buffer; normalization and the cast happen later, on the device.
class ImageDataset : public Dataset {
 public:
  virtual ImageShape image_shape() const = 0;
  virtual int64_t num_classes() const = 0;
  // Writes image `index` into `pixels` (exactly image_shape().bytes() bytes, HWC) and returns its
  // label. Throws DataError (data/error.h) when the sample cannot be read.
  virtual int64_t load_into(int64_t index, std::span<uint8_t> pixels, const SampleContext& context) = 0;
  // The deferred form (DataLoaderOptions::defer_decode): either fills `image` for the GPU
  // decoder (image.on_gpu) or writes `pixels` as load_into does; returns the label. The default
  // decodes on the CPU; ImageFolder leaves sequential JPEGs to the GPU.
  virtual int64_t load_deferred(int64_t index, DeferredImage& image, std::span<uint8_t> pixels,
                                const SampleContext& context);
  // Default get(): a uint8 HWC tensor and an int64 scalar label, via load_into.
  Example get(int64_t index, const SampleContext& context) override;
  using Dataset::get;
};

}  // namespace nabla::data
