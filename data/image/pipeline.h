// Public header. The fused per-sample image path: decode at the smallest DCT scale that still
// covers the crop, then crop + resize + flip straight into the caller's slot (a row of the
// loader's pinned batch buffer). No full-size image and no intermediate crop is ever allocated.
//
//   header (no pixels yet) -> plan: crop box, DCT scale, flip -> decode at scale -> resample
//
// plan_image() draws the randomness (SampleRandom: a pure function of seed, epoch and index),
// so the same sample is augmented identically on any worker thread.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "nabla/data/image/decode.h"
#include "nabla/data/image/transforms.h"
#include "nabla/data/sample_random.h"

namespace nabla::data {

struct ImagePlan {
  CropBox crop;       // in full-size pixels (for resize_center_crop: the whole image)
  ResampleMap map;    // in full-size pixel coordinates
  ScaleFactor scale;  // the DCT factor to decode at
  bool flip = false;
};

// Draws the crop and flip and chooses the decode scale for an image of header's size.
ImagePlan plan_image(const ImageHeader& header, const ImageTransform& transform, const DecodeOptions& options,
                     SampleRandom& random);

// Decodes `bytes` and writes the transformed (size, size, 3) image into `out`. Throws
// nabla::Error for a bad image (see decode.h). `out` must hold transform.size^2 * 3 bytes.
// Returns libjpeg's warning about damaged data when options.corrupt_data lets the image through
// (CorruptDataPolicy::warn), else "".
std::string decode_transformed(std::span<const uint8_t> bytes, const ImageTransform& transform,
                               const DecodeOptions& options, SampleRandom& random, std::span<uint8_t> out);

}  // namespace nabla::data
