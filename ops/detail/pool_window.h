// Internal (ops/pool.cpp and the pooling kernels). The geometry of 2-d pooling windows, shared by
// the CPU and CUDA kernels so that both backends agree on every window to the element: integer
// arithmetic only, compiled for host and device.
//
// Forward kernels compute one output element from its window. Backward kernels are gathers: each
// input element sums the gradients of the windows that cover it (the `*_covering` ranges below),
// so they need no atomics, write every element once and are deterministic on both backends.
//
// Note [Compact max-pool indices]
// max_pool2d_with_indices returns PyTorch's indices: the int64 plane position h * W + w of each
// window's max. The autograd path of max_pool2d, which only its own backward reads, saves the
// max's offset within its window instead, tap_h * kernel_w + tap_w, in one uint8 (when the window
// has at most 255 taps; 255 marks a window with no tap inside the input). For ResNet-50's stem
// pool at batch 256 (fp16, (256, 64, 112, 112) -> (256, 64, 56, 56)) the int64 indices were
// 411 MB written by the forward and read up to 4 times by the backward (overlapping windows),
// as many bytes as the fp16 input itself; the offsets are 51 MB. The backward turns each covering
// window (oh, ow) into the offset the element would have in it (max_tap_at) and compares that,
// so it never divides by W; the double backward, which gathers at plane positions, converts
// (max_index_position). Ties and NaN keep their rule: the first max wins, the first NaN wins.
#pragma once

#include <cstdint>
#include <limits>
#include <type_traits>

#include "nabla/core/dtype.h"
#include "nabla/core/error.h"
#include "nabla/core/host_device.h"

namespace nabla::ops {

enum class PoolKind : uint8_t { Max, Avg, AdaptiveAvg };

// One pooling problem over an (N, C, H, W) input and its (N, C, OH, OW) output. Tensors passed
// with it are dense in one memory format (all NCHW or all NHWC); kernels address the input and
// output by their strides and walk them in memory order. The functions below take the integer
// type of the geometry: the CUDA kernels run them in int (PoolGeometryT<int>), because 64-bit
// division, which the GPU emulates in dozens of instructions, made the kernels compute-bound.
template <typename I>
struct PoolGeometryT {
  PoolKind kind = PoolKind::Max;
  I n = 0, c = 0, h = 0, w = 0, out_h = 0, out_w = 0;
  I kernel_h = 1, kernel_w = 1, stride_h = 1, stride_w = 1;
  I pad_h = 0, pad_w = 0, dilation_h = 1, dilation_w = 1;
  bool count_include_pad = true;  // Avg only
};
using PoolGeometry = PoolGeometryT<int64_t>;

// [begin, end) of input coordinates; max pooling steps through it by the dilation.
template <typename I>
struct SpanT {
  I begin, end;
};
using Span = SpanT<int64_t>;

// Max pooling: the first tap of output o and its taps' step (taps outside [0, size) are skipped).
template <typename I>
NABLA_HOST_DEVICE I max_window_start(I o, I stride, I pad) {
  return o * stride - pad;
}

// Average pooling: the window of output o clipped to the input, and its divisor. With
// count_include_pad the divisor counts padding but not the part of a ceil_mode window that
// hangs past the padded input (as PyTorch).
template <typename I>
NABLA_HOST_DEVICE SpanT<I> avg_window(I o, I size, I kernel, I stride, I pad, I* padded_extent) {
  I begin = o * stride - pad;
  I end = begin + kernel < size + pad ? begin + kernel : size + pad;
  *padded_extent = end - begin;
  begin = begin < 0 ? 0 : begin;
  end = end > size ? size : end;
  return {begin, end};
}

// Adaptive pooling: PyTorch's floor(o * in / out) to ceil((o + 1) * in / out).
template <typename I>
NABLA_HOST_DEVICE SpanT<I> adaptive_window(I o, I in, I out) {
  return {(o * in) / out, ((o + 1) * in + out - 1) / out};
}

// The outputs [begin, end) whose windows may contain input coordinate i (a superset for max
// pooling, where a dilated window can skip i; the index comparison settles it).
template <typename I>
NABLA_HOST_DEVICE SpanT<I> max_outputs_covering(I i, I out, I kernel, I stride, I pad, I dilation) {
  const I first = i + pad - (kernel - 1) * dilation;  // o * stride >= first
  const I begin = first <= 0 ? 0 : (first + stride - 1) / stride;
  const I last = (i + pad) / stride;  // o * stride <= i + pad
  return {begin, last + 1 < out ? last + 1 : out};
}

template <typename I>
NABLA_HOST_DEVICE SpanT<I> avg_outputs_covering(I i, I out, I kernel, I stride, I pad) {
  const I begin = i + pad < kernel ? 0 : (i + pad - kernel) / stride + 1;
  const I last = (i + pad) / stride;
  return {begin, last + 1 < out ? last + 1 : out};
}

template <typename I>
NABLA_HOST_DEVICE SpanT<I> adaptive_outputs_covering(I i, I in, I out) {
  const I end = ((i + 1) * out + in - 1) / in;
  return {(i * out) / in, end < out ? end : out};
}

// The divisor of average-pooling output (oh, ow).
template <typename I>
NABLA_HOST_DEVICE I avg_divisor(const PoolGeometryT<I>& g, I oh, I ow) {
  if (g.kind == PoolKind::AdaptiveAvg) {
    const SpanT<I> hs = adaptive_window(oh, g.h, g.out_h), ws = adaptive_window(ow, g.w, g.out_w);
    return (hs.end - hs.begin) * (ws.end - ws.begin);
  }
  I ph = 0, pw = 0;
  const SpanT<I> hs = avg_window(oh, g.h, g.kernel_h, g.stride_h, g.pad_h, &ph);
  const SpanT<I> ws = avg_window(ow, g.w, g.kernel_w, g.stride_w, g.pad_w, &pw);
  return g.count_include_pad ? ph * pw : (hs.end - hs.begin) * (ws.end - ws.begin);
}

// The input window of average-pooling output o along one dim (H when `rows`).
template <typename I>
NABLA_HOST_DEVICE SpanT<I> avg_span(const PoolGeometryT<I>& g, I o, bool rows) {
  I unused = 0;
  if (g.kind == PoolKind::AdaptiveAvg)
    return rows ? adaptive_window(o, g.h, g.out_h) : adaptive_window(o, g.w, g.out_w);
  return rows ? avg_window(o, g.h, g.kernel_h, g.stride_h, g.pad_h, &unused)
              : avg_window(o, g.w, g.kernel_w, g.stride_w, g.pad_w, &unused);
}

// The outputs whose average windows contain input coordinate i along one dim.
template <typename I>
NABLA_HOST_DEVICE SpanT<I> avg_covering(const PoolGeometryT<I>& g, I i, bool rows) {
  if (g.kind == PoolKind::AdaptiveAvg)
    return rows ? adaptive_outputs_covering(i, g.h, g.out_h) : adaptive_outputs_covering(i, g.w, g.out_w);
  return rows ? avg_outputs_covering(i, g.out_h, g.kernel_h, g.stride_h, g.pad_h)
              : avg_outputs_covering(i, g.out_w, g.kernel_w, g.stride_w, g.pad_w);
}

// Max pooling: the tap along one dim of output o's window that lands on input coordinate i, or -1
// where the dilation steps over i. i must lie in the window's span, as for every output that
// max_outputs_covering gives for i.
template <typename I>
NABLA_HOST_DEVICE I max_tap_at(I i, I o, I stride, I pad, I dilation) {
  const I from_start = i - max_window_start(o, stride, pad);
  if (dilation == 1) return from_start;
  return from_start % dilation == 0 ? from_start / dilation : I(-1);
}

// Max-pooling indices (Note [Compact max-pool indices]): MaxIndex is uint8_t for window offsets
// and int64_t for plane positions.
inline constexpr int64_t kMaxWindowOffsets = 255;  // taps a window may have for uint8 offsets
inline constexpr uint8_t kNoWindowOffset = 255;    // a window with no tap inside the input

template <typename MaxIndex>
NABLA_HOST_DEVICE MaxIndex no_max_index() {
  static_assert(std::is_same_v<MaxIndex, uint8_t> || std::is_same_v<MaxIndex, int64_t>);
  if constexpr (std::is_same_v<MaxIndex, uint8_t>) {
    return kNoWindowOffset;
  } else {
    return -1;
  }
}

// The index stored for a max at tap (tap_h, tap_w) of its window, input element (ih, iw). The
// backward compares each covering window's saved index with this for the element itself.
template <typename MaxIndex, typename I>
NABLA_HOST_DEVICE MaxIndex max_index_of(const PoolGeometryT<I>& g, I tap_h, I tap_w, I ih, I iw) {
  if constexpr (std::is_same_v<MaxIndex, uint8_t>) {
    return static_cast<uint8_t>(tap_h * g.kernel_w + tap_w);
  } else {
    return static_cast<int64_t>(ih) * g.w + iw;
  }
}

// The plane position h * W + w that output (oh, ow)'s saved index points at; -1 for none.
template <typename MaxIndex, typename I>
NABLA_HOST_DEVICE int64_t max_index_position(const PoolGeometryT<I>& g, I oh, I ow, MaxIndex index) {
  if constexpr (std::is_same_v<MaxIndex, uint8_t>) {
    if (index == kNoWindowOffset) return -1;
    const I offset = static_cast<I>(index);
    const I ih = max_window_start(oh, g.stride_h, g.pad_h) + offset / g.kernel_w * g.dilation_h;
    const I iw = max_window_start(ow, g.stride_w, g.pad_w) + offset % g.kernel_w * g.dilation_w;
    return static_cast<int64_t>(ih) * g.w + iw;
  } else {
    return index;
  }
}

}  // namespace nabla::ops

namespace nabla::ops {

// Whether max pooling's saved indices can be uint8 window offsets.
inline bool fits_window_offsets(const PoolGeometry& g) {
  return g.kernel_h * g.kernel_w <= kMaxWindowOffsets;
}

// Calls fn.template operator()<MaxIndex>() for the dtype of max-pooling indices: uint8 window
// offsets or int64 plane positions. The kernel families of both backends dispatch here.
template <typename Fn>
void dispatch_max_index(DType dtype, Fn&& fn) {
  NABLA_ASSERT(dtype == DType::UInt8 || dtype == DType::Int64,
               "max pooling indices are uint8 or int64, got {}", dtype_name(dtype));
  if (dtype == DType::UInt8) {
    fn.template operator()<uint8_t>();
  } else {
    fn.template operator()<int64_t>();
  }
}

// The geometry in I (int for the CUDA kernels); false when a field is too large for the products
// of two fields that the functions above form (o * stride, (o + 1) * in) to fit in I.
template <typename I>
inline bool narrow_geometry(const PoolGeometry& g, PoolGeometryT<I>* out) {
  const int64_t fields[] = {g.n,        g.c,        g.h,        g.w,     g.out_h, g.out_w,      g.kernel_h,
                            g.kernel_w, g.stride_h, g.stride_w, g.pad_h, g.pad_w, g.dilation_h, g.dilation_w};
  for (int64_t f : fields) {
    if (f < 0 || f > 32767 || f * f > static_cast<int64_t>(std::numeric_limits<I>::max() / 4)) return false;
  }
  *out = {g.kind,
          static_cast<I>(g.n),
          static_cast<I>(g.c),
          static_cast<I>(g.h),
          static_cast<I>(g.w),
          static_cast<I>(g.out_h),
          static_cast<I>(g.out_w),
          static_cast<I>(g.kernel_h),
          static_cast<I>(g.kernel_w),
          static_cast<I>(g.stride_h),
          static_cast<I>(g.stride_w),
          static_cast<I>(g.pad_h),
          static_cast<I>(g.pad_w),
          static_cast<I>(g.dilation_h),
          static_cast<I>(g.dilation_w),
          g.count_include_pad};
  return true;
}

}  // namespace nabla::ops
