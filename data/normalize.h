// Public header. Normalize a uint8 NHWC image batch into the training dtype and layout:
//   out[n, c, h, w] = (in[n, h, w, c] / 255 - mean[c]) / stddev[c]
// computed in float32 as fma(in, 1 / (255 * stddev[c]), -mean[c] / stddev[c]), then cast to
// float32, float16 or bfloat16. The output is logically (N, C, H, W); its storage is NCHW
// (MemoryFormat::Contiguous) or NHWC (MemoryFormat::ChannelsLast), as the model wants.
//
// A CUDA input runs one fused kernel on the current stream (no sync, memory from the caching
// allocator); a CPU input runs the same arithmetic on the CPU, which is also the test reference.
#pragma once

#include <vector>

#include "nabla/core/tensor.h"

namespace nabla::data {

struct NormalizeOptions {
  // ImageNet statistics by default; one value per channel, or one value for all channels.
  std::vector<float> mean = {0.485f, 0.456f, 0.406f};
  std::vector<float> stddev = {0.229f, 0.224f, 0.225f};
  DType dtype = kFloat32;                                 // float32, float16 or bfloat16
  MemoryFormat memory_format = MemoryFormat::Contiguous;  // or ChannelsLast
};

// images: (N, H, W, C) uint8, contiguous, on the CPU or a CUDA device. C is 1 to 4.
Tensor normalize_images(const Tensor& images, const NormalizeOptions& options = {});

// The per-channel affine form both paths use: out = fma(x, scale[c], bias[c]).
struct NormalizeCoefficients {
  static constexpr int kMaxChannels = 4;
  float scale[kMaxChannels] = {};
  float bias[kMaxChannels] = {};
};
NormalizeCoefficients normalize_coefficients(const NormalizeOptions& options, int64_t channels);

}  // namespace nabla::data
