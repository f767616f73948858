// Internal (data/ only). The GPU decoder's last step as one kernel per batch: each decoded image's
// crop, bilinear resize and flip (Note [Bilinear geometry], through the CPU resampler's own taps
// and blends in image/detail/bilinear.h), rounded to bytes as the CPU path rounds, then
// normalized and cast like normalize_images, into an (N, C, size, size) batch stored NCHW or NHWC.
#pragma once

#include <cstdint>

#include "nabla/core/cuda/stream.h"
#include "nabla/core/dtype.h"
#include "nabla/data/image/detail/bilinear.h"
#include "nabla/data/normalize.h"

namespace nabla::data::cuda {

// One image of the batch, as the kernel reads it (a plain struct copied to the device).
struct ResampleSource {
  const uint8_t* pixels = nullptr;  // device memory: (height, width, 3) RGB, rows `pitch` bytes apart
  int64_t pitch = 0;
  int32_t taps = 0;  // index of its `size` y taps in the tap table; its `size` x taps follow
  int32_t flip = 0;  // mirror left-right (the tap of output column x is size - 1 - x)
};

// sources: n entries, taps: the table they index, both in device memory; dst: n * 3 * size * size
// elements of `dtype` (float32, float16 or bfloat16).
void launch_resample_normalize(const ResampleSource* sources, const detail::Tap* taps, int64_t n,
                               int64_t size, void* dst, DType dtype, bool channels_last,
                               const NormalizeCoefficients& k, nabla::cuda::Stream stream);

}  // namespace nabla::data::cuda
