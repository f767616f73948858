// The body shared by the libFuzzer target (jpeg_fuzz.cpp) and the mutation test that runs in CI
// (tests/data/image_fuzz_test.cpp): push arbitrary bytes through the whole per-sample image path
// (header, plan, DCT-scaled decode, crop + resize + flip) and through a full-size decode. A
// nabla::Error is the only acceptable failure; anything else (another exception, a crash, an
// ASan report, a hang) is a bug.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "nabla/core/error.h"
#include "nabla/data/image/decode.h"
#include "nabla/data/image/pipeline.h"

namespace nabla::fuzz {

// Returns true when the bytes decoded as an image.
inline bool jpeg_fuzz_one(const uint8_t* data, size_t size) {
  std::span<const uint8_t> bytes(data, size);
  // A small pixel limit keeps each input fast; the limit itself is part of what is exercised.
  data::DecodeOptions options{.max_pixels = 1 << 22, .png = data::PngPolicy::decode};
  try {
    data::SampleRandom random(data::SampleContext{.seed = size});
    std::vector<uint8_t> slot(24 * 24 * 3);
    data::decode_transformed(bytes, data::imagenet_train_transform(24), options, random, slot);
    std::vector<uint8_t> val(16 * 16 * 3);
    data::decode_transformed(bytes, data::imagenet_val_transform(16, 18), options, random, val);
    auto full = data::decode_image(bytes, options);
    volatile uint8_t sink = 0;  // touch every byte, so the sanitizer sees a short buffer
    for (uint8_t b : full.pixels) sink = sink ^ b;
    return true;
  } catch (const nabla::Error&) {
    return false;
  }
}

}  // namespace nabla::fuzz
