// Internal (ops/pool.cpp and the pooling kernels). The geometry of 2-d pooling windows, shared by
// the CPU and CUDA kernels so that both backends agree on every window to the element: integer
// arithmetic only, compiled for host and device.
//
// Forward kernels compute one output element from its window. Backward kernels are gathers: each
// input element sums the gradients of the windows that cover it (the `*_covering` ranges below),
// so they need no atomics, write every element once and are deterministic on both backends.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define NABLA_POOL_HD __host__ __device__ __forceinline__
#else
#define NABLA_POOL_HD inline
#endif

namespace nabla::ops {

enum class PoolKind : uint8_t { Max, Avg, AdaptiveAvg };

// One pooling problem over an (N, C, H, W) input and its (N, C, OH, OW) output. Tensors passed
// with it are dense in one memory format (all NCHW or all NHWC); kernels address the input and
// output by their strides and walk them in memory order.
struct PoolGeometry {
  PoolKind kind = PoolKind::Max;
  int64_t n = 0, c = 0, h = 0, w = 0, out_h = 0, out_w = 0;
  int64_t kernel_h = 1, kernel_w = 1, stride_h = 1, stride_w = 1;
  int64_t pad_h = 0, pad_w = 0, dilation_h = 1, dilation_w = 1;
  bool count_include_pad = true;  // Avg only
};

// [begin, end) of input coordinates; max pooling steps through it by the dilation.
struct Span {
  int64_t begin, end;
};

// Max pooling: the first tap of output o and its taps' step (taps outside [0, size) are skipped).
NABLA_POOL_HD int64_t max_window_start(int64_t o, int64_t stride, int64_t pad) {
  return o * stride - pad;
}

// Average pooling: the window of output o clipped to the input, and its divisor. With
// count_include_pad the divisor counts padding but not the part of a ceil_mode window that
// hangs past the padded input (as PyTorch).
NABLA_POOL_HD Span avg_window(int64_t o, int64_t size, int64_t kernel, int64_t stride, int64_t pad,
                              int64_t* padded_extent) {
  int64_t begin = o * stride - pad;
  int64_t end = begin + kernel < size + pad ? begin + kernel : size + pad;
  *padded_extent = end - begin;
  begin = begin < 0 ? 0 : begin;
  end = end > size ? size : end;
  return {begin, end};
}

// Adaptive pooling: PyTorch's floor(o * in / out) to ceil((o + 1) * in / out).
NABLA_POOL_HD Span adaptive_window(int64_t o, int64_t in, int64_t out) {
  return {(o * in) / out, ((o + 1) * in + out - 1) / out};
}

// The outputs [begin, end) whose windows may contain input coordinate i (a superset for max
// pooling, where a dilated window can skip i; the index comparison settles it).
NABLA_POOL_HD Span max_outputs_covering(int64_t i, int64_t out, int64_t kernel, int64_t stride, int64_t pad,
                                        int64_t dilation) {
  const int64_t first = i + pad - (kernel - 1) * dilation;  // o * stride >= first
  const int64_t begin = first <= 0 ? 0 : (first + stride - 1) / stride;
  const int64_t last = (i + pad) / stride;  // o * stride <= i + pad
  return {begin, last + 1 < out ? last + 1 : out};
}

NABLA_POOL_HD Span avg_outputs_covering(int64_t i, int64_t out, int64_t kernel, int64_t stride, int64_t pad) {
  const int64_t begin = i + pad < kernel ? 0 : (i + pad - kernel) / stride + 1;
  const int64_t last = (i + pad) / stride;
  return {begin, last + 1 < out ? last + 1 : out};
}

NABLA_POOL_HD Span adaptive_outputs_covering(int64_t i, int64_t in, int64_t out) {
  const int64_t end = ((i + 1) * out + in - 1) / in;
  return {(i * out) / in, end < out ? end : out};
}

// The divisor of average-pooling output (oh, ow).
NABLA_POOL_HD int64_t avg_divisor(const PoolGeometry& g, int64_t oh, int64_t ow) {
  if (g.kind == PoolKind::AdaptiveAvg) {
    const Span hs = adaptive_window(oh, g.h, g.out_h), ws = adaptive_window(ow, g.w, g.out_w);
    return (hs.end - hs.begin) * (ws.end - ws.begin);
  }
  int64_t ph = 0, pw = 0;
  const Span hs = avg_window(oh, g.h, g.kernel_h, g.stride_h, g.pad_h, &ph);
  const Span ws = avg_window(ow, g.w, g.kernel_w, g.stride_w, g.pad_w, &pw);
  return g.count_include_pad ? ph * pw : (hs.end - hs.begin) * (ws.end - ws.begin);
}

// The input window of average-pooling output o along one dim (H when `rows`).
NABLA_POOL_HD Span avg_span(const PoolGeometry& g, int64_t o, bool rows) {
  int64_t unused = 0;
  if (g.kind == PoolKind::AdaptiveAvg)
    return rows ? adaptive_window(o, g.h, g.out_h) : adaptive_window(o, g.w, g.out_w);
  return rows ? avg_window(o, g.h, g.kernel_h, g.stride_h, g.pad_h, &unused)
              : avg_window(o, g.w, g.kernel_w, g.stride_w, g.pad_w, &unused);
}

// The outputs whose average windows contain input coordinate i along one dim.
NABLA_POOL_HD Span avg_covering(const PoolGeometry& g, int64_t i, bool rows) {
  if (g.kind == PoolKind::AdaptiveAvg)
    return rows ? adaptive_outputs_covering(i, g.h, g.out_h) : adaptive_outputs_covering(i, g.w, g.out_w);
  return rows ? avg_outputs_covering(i, g.out_h, g.kernel_h, g.stride_h, g.pad_h)
              : avg_outputs_covering(i, g.out_w, g.kernel_w, g.stride_w, g.pad_w);
}

}  // namespace nabla::ops
