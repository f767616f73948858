// Internal to nabla::data (not installed). The taps and blends of Note [Bilinear geometry]
// (transforms.h), shared by the CPU resampler (transforms.cpp) and the GPU decoder's resample
// kernel (data/cuda/resample_normalize.cu): one formula, so both turn the same pixels into the same
// bytes. Both sides evaluate it without fused multiply-adds (transforms.cpp is compiled with
// -ffp-contract=off, the kernel with --fmad=false), as PyTorch's CPU upsample_bilinear2d does.
#pragma once

#include <cstdint>
#include <vector>

#include "nabla/core/host_device.h"

namespace nabla::data {
struct AxisMap;
}

namespace nabla::data::detail {

// One output coordinate's two source neighbours and the weight of the second.
struct Tap {
  int32_t i0 = 0, i1 = 0;
  float w1 = 0;
};

// The taps of `out_extent` output coordinates on a source axis of `source_extent` pixels.
std::vector<Tap> bilinear_taps(const AxisMap& map, int64_t out_extent, int64_t source_extent);

// (1 - w1) * a + w1 * b: the horizontal blend of two pixels, then the vertical blend of two rows.
NABLA_HOST_DEVICE float bilinear_blend(float a, float b, float w1) {
  return (1.0f - w1) * a + w1 * b;
}

// A blend of bytes lies in [0, 255] (up to float rounding): round it half to even like
// torch.round. Adding 1.5 * 2^23 leaves no fraction bits, so the addition itself rounds.
NABLA_HOST_DEVICE uint8_t round_to_byte(float v) {
  v = (v + 12582912.0f) - 12582912.0f;
  return static_cast<uint8_t>(static_cast<int32_t>(v));
}

}  // namespace nabla::data::detail
