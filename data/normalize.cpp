// normalize_images (see normalize.h): argument checks, the CPU path, and the hand-off to the
// fused CUDA kernel for device tensors. Both paths use the same coefficients and the same fma, so
// float32 results agree bit for bit.
#include "nabla/data/normalize.h"

#include <cmath>

#include "nabla/core/cuda/stream.h"
#include "nabla/core/dispatch.h"
#include "nabla/core/half.h"
#include "nabla/data/cuda/normalize_cuda.h"

namespace nabla::data {

namespace {

float channel_value(const std::vector<float>& values, int64_t channel) {
  return values.size() == 1 ? values[0] : values[static_cast<size_t>(channel)];
}

template <typename T>
void normalize_cpu(const uint8_t* src, T* dst, int64_t n, int64_t hw, int64_t c, bool channels_last,
                   const NormalizeCoefficients& k) {
  for (int64_t b = 0; b < n; ++b) {
    const uint8_t* image = src + b * hw * c;  // (H*W, C)
    T* out = dst + b * hw * c;
    for (int64_t p = 0; p < hw; ++p) {
      for (int64_t ch = 0; ch < c; ++ch) {
        float v = std::fma(static_cast<float>(image[p * c + ch]), k.scale[ch], k.bias[ch]);
        out[channels_last ? p * c + ch : ch * hw + p] = T(v);
      }
    }
  }
}

}  // namespace

NormalizeCoefficients normalize_coefficients(const NormalizeOptions& options, int64_t channels) {
  NABLA_CHECK(channels >= 1 && channels <= NormalizeCoefficients::kMaxChannels,
              "normalize_images: images must have 1 to {} channels, got {}",
              NormalizeCoefficients::kMaxChannels, channels);
  for (const auto* values : {&options.mean, &options.stddev}) {
    const char* name = values == &options.mean ? "mean" : "stddev";
    NABLA_CHECK(values->size() == 1 || static_cast<int64_t>(values->size()) == channels,
                "normalize_images: {} needs 1 value or one per channel ({}), got {}", name, channels,
                values->size());
  }
  NormalizeCoefficients k;
  for (int64_t ch = 0; ch < channels; ++ch) {
    float mean = channel_value(options.mean, ch), stddev = channel_value(options.stddev, ch);
    NABLA_CHECK(
        std::isfinite(stddev) && stddev > 0 && std::isfinite(mean),
        "normalize_images: channel {} needs a finite mean and a positive stddev, got mean {} stddev {}", ch,
        mean, stddev);
    k.scale[ch] = 1.0f / (255.0f * stddev);
    k.bias[ch] = -mean / stddev;
  }
  return k;
}

Tensor normalize_images(const Tensor& images, const NormalizeOptions& options) {
  NABLA_CHECK(images.defined() && images.dim() == 4 && images.dtype() == kUInt8,
              "normalize_images: expects a (N, H, W, C) uint8 batch, got {}",
              images.defined() ? describe(images) : std::string("an undefined tensor"));
  NABLA_CHECK(images.is_contiguous(), "normalize_images: the batch must be contiguous NHWC, got strides {}",
              shape_str(images.strides()));
  NABLA_CHECK(options.dtype == kFloat32 || options.dtype == kFloat16 || options.dtype == kBFloat16,
              "normalize_images: output dtype must be float32, float16 or bfloat16, got {}",
              dtype_name(options.dtype));
  NABLA_CHECK(options.memory_format == MemoryFormat::Contiguous ||
                  options.memory_format == MemoryFormat::ChannelsLast,
              "normalize_images: memory_format must be Contiguous (NCHW) or ChannelsLast (NHWC)");
  const int64_t n = images.size(0), h = images.size(1), w = images.size(2), c = images.size(3);
  NormalizeCoefficients k = normalize_coefficients(options, c);
  const bool channels_last = options.memory_format == MemoryFormat::ChannelsLast;
  // Allocated on the current stream, where the kernel runs (the caching allocator tracks it).
  Tensor out = Tensor::empty(
      {n, c, h, w},
      {.dtype = options.dtype, .device = images.device(), .memory_format = options.memory_format});
  const auto* src = static_cast<const uint8_t*>(images.data_ptr());
  dispatch(
      "normalize_images", images,
      [&] {
        if (options.dtype == kFloat32) {
          normalize_cpu(src, out.data_ptr<float>(), n, h * w, c, channels_last, k);
        } else if (options.dtype == kFloat16) {
          normalize_cpu(src, out.data_ptr<Half>(), n, h * w, c, channels_last, k);
        } else {
          normalize_cpu(src, out.data_ptr<BFloat16>(), n, h * w, c, channels_last, k);
        }
      },
      [&] {
        cuda::launch_normalize(src, out.data_ptr(), n, h, w, c, options.dtype, channels_last, k,
                               nabla::cuda::current_stream(images.device().index));
      });
  return out;
}

}  // namespace nabla::data
