// Crop sampling, bilinear resampling and normalization; see transforms.h and
// Note [Bilinear geometry] there.
#include "nabla/data/image/transforms.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "nabla/core/error.h"
#include "nabla/data/image/detail/bilinear.h"

namespace nabla::data {
namespace {

using detail::bilinear_blend;
using detail::Tap;

// Python's round(): halves go to the even neighbour (the default floating-point rounding mode).
int64_t round_half_even(double v) {
  return static_cast<int64_t>(std::nearbyint(v));
}

// One source row blended horizontally at every output column, written in flipped order when
// asked. The channel count is a template parameter for RGB so the inner loop unrolls.
template <int64_t kChannels>
void blend_row_fixed(const uint8_t* row, const std::vector<Tap>& xs, int64_t channels, bool flip,
                     float* dst) {
  const int64_t c_count = kChannels > 0 ? kChannels : channels;
  const auto out_width = static_cast<int64_t>(xs.size());
  for (int64_t ox = 0; ox < out_width; ++ox) {
    const Tap& tx = xs[static_cast<size_t>(ox)];
    const uint8_t* p0 = row + tx.i0 * c_count;
    const uint8_t* p1 = row + tx.i1 * c_count;
    float* d = dst + (flip ? out_width - 1 - ox : ox) * c_count;
    for (int64_t c = 0; c < c_count; ++c)
      d[c] = bilinear_blend(static_cast<float>(p0[c]), static_cast<float>(p1[c]), tx.w1);
  }
}

void blend_row(const uint8_t* row, const std::vector<Tap>& xs, int64_t channels, bool flip, float* dst) {
  if (channels == 3) {
    blend_row_fixed<3>(row, xs, channels, flip, dst);
  } else {
    blend_row_fixed<0>(row, xs, channels, flip, dst);
  }
}

// The vertical blend of two horizontally blended rows, rounded half to even like torch.round.
void blend_rows(const float* __restrict upper, const float* __restrict lower, float w1, int64_t count,
                uint8_t* __restrict dst) {
  for (int64_t k = 0; k < count; ++k) dst[k] = detail::round_to_byte(bilinear_blend(upper[k], lower[k], w1));
}

}  // namespace

CropBox random_resized_crop_box(int64_t height, int64_t width, const RandomResizedCropOptions& options,
                                SampleRandom& random) {
  NABLA_CHECK(height > 0 && width > 0, "RandomResizedCrop needs a non-empty image, got {}x{}", height, width);
  NABLA_CHECK(0 < options.scale_min && options.scale_min <= options.scale_max && options.scale_max <= 1.0,
              "RandomResizedCrop scale range must satisfy 0 < min <= max <= 1, got ({}, {})",
              options.scale_min, options.scale_max);
  NABLA_CHECK(0 < options.ratio_min && options.ratio_min <= options.ratio_max,
              "RandomResizedCrop ratio range must satisfy 0 < min <= max, got ({}, {})", options.ratio_min,
              options.ratio_max);
  auto area = static_cast<double>(height * width);
  double log_min = std::log(options.ratio_min), log_max = std::log(options.ratio_max);
  for (int attempt = 0; attempt < 10; ++attempt) {
    double target_area = area * random.uniform(options.scale_min, options.scale_max);
    double aspect = std::exp(random.uniform(log_min, log_max));
    int64_t w = round_half_even(std::sqrt(target_area * aspect));
    int64_t h = round_half_even(std::sqrt(target_area / aspect));
    if (0 < w && w <= width && 0 < h && h <= height) {
      int64_t top = random.integer(0, height - h);
      int64_t left = random.integer(0, width - w);
      return {.top = top, .left = left, .height = h, .width = w};
    }
  }
  // Fallback: the whole image, cut down to the nearest allowed aspect ratio, centred.
  double in_ratio = static_cast<double>(width) / static_cast<double>(height);
  int64_t w = width, h = height;
  if (in_ratio < options.ratio_min) {
    h = round_half_even(static_cast<double>(w) / options.ratio_min);
  } else if (in_ratio > options.ratio_max) {
    w = round_half_even(static_cast<double>(h) * options.ratio_max);
  }
  return {.top = (height - h) / 2, .left = (width - w) / 2, .height = h, .width = w};
}

void resized_size(int64_t height, int64_t width, int64_t shorter, int64_t& out_height, int64_t& out_width) {
  NABLA_CHECK(shorter > 0, "Resize needs a positive size, got {}", shorter);
  int64_t short_side = std::min(height, width), long_side = std::max(height, width);
  // torchvision: int(size * long / short), truncating.
  auto new_long = static_cast<int64_t>(static_cast<double>(shorter) * static_cast<double>(long_side) /
                                       static_cast<double>(short_side));
  out_height = height <= width ? shorter : new_long;
  out_width = height <= width ? new_long : shorter;
}

AxisMap AxisMap::scaled(double scale, int64_t extent) const {
  auto to_scaled = [scale](double u) { return (u + 0.5) * scale - 0.5; };
  auto last = static_cast<double>(extent - 1);
  return {.origin = origin * scale,
          .skip = skip,
          .step = step * scale,
          .lo = std::clamp(to_scaled(lo), 0.0, last),
          .hi = std::clamp(to_scaled(hi), 0.0, last),
          .float_like_pytorch = false};
}

ResampleMap crop_resize_map(const CropBox& box, int64_t out_height, int64_t out_width) {
  NABLA_CHECK(box.height > 0 && box.width > 0 && out_height > 0 && out_width > 0,
              "resized crop needs a non-empty crop and output, got crop {}x{} -> {}x{}", box.height,
              box.width, out_height, out_width);
  auto axis = [](int64_t start, int64_t extent, int64_t out) {
    return AxisMap{.origin = static_cast<double>(start),
                   .skip = 0,
                   .step = static_cast<double>(extent) / static_cast<double>(out),
                   .lo = static_cast<double>(start),
                   .hi = static_cast<double>(start + extent - 1),
                   .float_like_pytorch = true};
  };
  return {.y = axis(box.top, box.height, out_height), .x = axis(box.left, box.width, out_width)};
}

ResampleMap resize_center_crop_map(int64_t height, int64_t width, int64_t shorter, int64_t out_height,
                                   int64_t out_width) {
  int64_t resized_h = 0, resized_w = 0;
  resized_size(height, width, shorter, resized_h, resized_w);
  // torchvision's CenterCrop: int(round((resized - out) / 2)); a crop larger than the resized
  // image would be zero-padded there, which we refuse rather than imitate.
  NABLA_CHECK(out_height <= resized_h && out_width <= resized_w,
              "CenterCrop {}x{} is larger than the resized image {}x{}; choose resize >= size", out_height,
              out_width, resized_h, resized_w);
  auto axis = [](int64_t in, int64_t resized, int64_t out) {
    int64_t start = round_half_even(static_cast<double>(resized - out) / 2.0);
    return AxisMap{.origin = 0,
                   .skip = static_cast<double>(start),
                   .step = static_cast<double>(in) / static_cast<double>(resized),
                   .lo = 0.0,
                   .hi = static_cast<double>(in - 1),
                   .float_like_pytorch = true};
  };
  return {.y = axis(height, resized_h, out_height), .x = axis(width, resized_w, out_width)};
}

void resample_bilinear(std::span<const uint8_t> source, int64_t source_height, int64_t source_width,
                       int64_t channels, const ResampleMap& map, std::span<uint8_t> out, int64_t out_height,
                       int64_t out_width, bool flip) {
  NABLA_CHECK(static_cast<int64_t>(source.size()) == source_height * source_width * channels,
              "resample source holds {} bytes, expected {}x{}x{}", source.size(), source_height, source_width,
              channels);
  NABLA_CHECK(static_cast<int64_t>(out.size()) == out_height * out_width * channels,
              "resample output holds {} bytes, expected {}x{}x{}", out.size(), out_height, out_width,
              channels);
  thread_local std::vector<Tap> xs, ys;
  xs = detail::bilinear_taps(map.x, out_width, source_width);
  ys = detail::bilinear_taps(map.y, out_height, source_height);
  // Separable: blend each needed source row horizontally once (flip applied here, as the write
  // order), then blend two such rows vertically. This is PyTorch's association
  // wy0 * (wx0 * p00 + wx1 * p01) + wy1 * (...), so float rounding agrees with it.
  const int64_t out_row = out_width * channels;
  thread_local std::vector<float> upper_buffer, lower_buffer;
  upper_buffer.resize(static_cast<size_t>(out_row));
  lower_buffer.resize(static_cast<size_t>(out_row));
  // Raw pointers: the uint8 stores below may alias anything, which would otherwise make the
  // compiler reload the vectors' data pointers on every element.
  float* upper = upper_buffer.data();
  float* lower = lower_buffer.data();
  int64_t upper_row = -1, lower_row = -1;
  for (int64_t oy = 0; oy < out_height; ++oy) {
    const Tap& ty = ys[static_cast<size_t>(oy)];
    // Consecutive output rows often share source rows (always when enlarging): reuse them.
    if (ty.i0 == lower_row) std::swap(upper, lower), std::swap(upper_row, lower_row);
    if (ty.i0 != upper_row) {
      blend_row(source.data() + ty.i0 * source_width * channels, xs, channels, flip, upper);
      upper_row = ty.i0;
    }
    if (ty.i1 != lower_row) {
      blend_row(source.data() + ty.i1 * source_width * channels, xs, channels, flip, lower);
      lower_row = ty.i1;
    }
    blend_rows(upper, lower, ty.w1, out_row, out.data() + oy * out_row);
  }
}

namespace detail {

std::vector<Tap> bilinear_taps(const AxisMap& map, int64_t out_extent, int64_t source_extent) {
  std::vector<Tap> result(static_cast<size_t>(out_extent));
  for (int64_t o = 0; o < out_extent; ++o) {
    double x = static_cast<double>(o) + map.skip + 0.5;
    double relative = map.float_like_pytorch
                          ? static_cast<double>(static_cast<float>(static_cast<float>(map.step) * x - 0.5))
                          : map.step * x - 0.5;
    double u = std::clamp(map.origin + relative, map.lo, map.hi);
    auto i0 = std::clamp<int64_t>(static_cast<int64_t>(std::floor(u)), 0, source_extent - 1);
    int64_t i1 = std::min(i0 + 1, source_extent - 1);
    result[static_cast<size_t>(o)] = {.i0 = static_cast<int32_t>(i0),
                                      .i1 = static_cast<int32_t>(i1),
                                      .w1 = static_cast<float>(u - static_cast<double>(i0))};
  }
  return result;
}

}  // namespace detail

void normalize_to_chw(std::span<const uint8_t> hwc, int64_t height, int64_t width, int64_t channels,
                      std::span<const float> mean, std::span<const float> std, std::span<float> chw) {
  NABLA_CHECK(static_cast<int64_t>(mean.size()) == channels && static_cast<int64_t>(std.size()) == channels,
              "Normalize needs one mean and one std per channel ({}), got {} and {}", channels, mean.size(),
              std.size());
  auto count = height * width * channels;
  NABLA_CHECK(static_cast<int64_t>(hwc.size()) == count && static_cast<int64_t>(chw.size()) == count,
              "Normalize buffers hold {} and {} values, expected {}x{}x{} = {}", hwc.size(), chw.size(),
              height, width, channels, count);
  for (int64_t c = 0; c < channels; ++c) {
    NABLA_CHECK(std[static_cast<size_t>(c)] != 0.0f, "Normalize std of channel {} is zero", c);
    float scale = 1.0f / (255.0f * std[static_cast<size_t>(c)]);
    float shift = mean[static_cast<size_t>(c)] / std[static_cast<size_t>(c)];
    float* plane = chw.data() + c * height * width;
    for (int64_t p = 0; p < height * width; ++p)
      plane[p] = hwc[static_cast<size_t>(p * channels + c)] * scale - shift;
  }
}

}  // namespace nabla::data
