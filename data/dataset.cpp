// ImageDataset::get: the generic Example path over load_into, for callers that want tensors
// (tests, small tools) rather than the loader's pinned batch buffers.
#include "nabla/data/dataset.h"

#include "nabla/data/error.h"
#include "nabla/data/image/deferred_image.h"

namespace nabla::data {

Example ImageDataset::get(int64_t index, const SampleContext& context) {
  NABLA_CHECK(index >= 0 && index < size(), "dataset index {} out of range [0, {})", index, size());
  ImageShape shape = image_shape();
  Tensor image = Tensor::empty({shape.height, shape.width, shape.channels}, {.dtype = kUInt8});
  std::span<uint8_t> pixels(image.data_ptr<uint8_t>(), static_cast<size_t>(shape.bytes()));
  int64_t label = load_into(index, pixels, context);
  Tensor target = Tensor::empty({}, {.dtype = kInt64});
  *target.data_ptr<int64_t>() = label;
  return {.input = image, .target = target};
}

int64_t ImageDataset::load_deferred(int64_t index, DeferredImage& image, std::span<uint8_t> pixels,
                                    const SampleContext& context) {
  image.on_gpu = false;
  return load_into(index, pixels, context);
}

}  // namespace nabla::data
