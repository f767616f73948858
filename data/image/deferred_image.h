// Public header. DeferredImage: what a DataLoader worker leaves for the GPU decoder when the
// loader defers decoding (DataLoaderOptions::defer_decode; Note [GPU decode] in docs/design/data.md).
#pragma once

#include <cstdint>
#include <vector>

#include "nabla/data/image/transforms.h"

namespace nabla::data {

// An image left for the GPU decoder (DataLoaderOptions::defer_decode): the file's bytes and the
// crop, resize and flip to apply to its full-size pixels, drawn as the CPU path draws them.
struct DeferredImage {
  bool on_gpu = false;         // false: decoded on the CPU, into the batch's pixels as load_into does
  std::vector<uint8_t> bytes;  // the JPEG file (its capacity is reused from batch to batch)
  int width = 0, height = 0;   // full size
  ResampleMap map;             // in full-size pixels (no DCT scaling on the GPU)
  bool flip = false;
};

}  // namespace nabla::data
