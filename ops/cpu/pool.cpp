// CPU max, average and adaptive average pooling, forward and backward.
//
// Every kernel computes one element at a time from the shared window geometry (pool_window.h):
// forward kernels walk the output, backward kernels walk the input and gather the gradients of
// the windows that cover each element (no scatter, so threads never write the same element).
// NCHW tensors are split over OpenMP threads by (N, C) planes; NHWC tensors by (N, H) rows, with
// C innermost, so both read and write in memory order. Sums accumulate in double for float32
// and float64 and in float for float16/bfloat16.
#include <cmath>
#include <limits>
#include <type_traits>

#include "nabla/ops/cpu/loops.h"
#include "nabla/ops/cpu/pool_kernels.h"

namespace nabla::ops::cpu {

namespace {

template <typename T>
using sum_t = std::conditional_t<std::is_floating_point_v<T>, double, float>;

struct Strides4 {
  int64_t n, c, h, w;
  int64_t at(int64_t ni, int64_t ci, int64_t hi, int64_t wi) const {
    return ni * n + ci * c + hi * h + wi * w;
  }
};

Strides4 strides_of(const Tensor& t) {
  return {t.stride(0), t.stride(1), t.stride(2), t.stride(3)};
}

// fn(n, c, h, w) for every position of an (N, C, H, W) space, in `t`'s memory order.
template <typename Fn>
void for_each_position(const Tensor& t, Fn fn) {
  const int64_t N = t.size(0), C = t.size(1), H = t.size(2), W = t.size(3);
  const bool parallel = t.numel() > kParallelGrain;
  if (t.is_contiguous()) {
#pragma omp parallel for if (parallel)
    for (int64_t plane = 0; plane < N * C; ++plane) {
      for (int64_t h = 0; h < H; ++h) {
        for (int64_t w = 0; w < W; ++w) fn(plane / C, plane % C, h, w);
      }
    }
  } else {
#pragma omp parallel for if (parallel)
    for (int64_t row = 0; row < N * H; ++row) {
      for (int64_t w = 0; w < W; ++w) {
        for (int64_t c = 0; c < C; ++c) fn(row / H, c, row % H, w);
      }
    }
  }
}

template <typename T>
void max_forward(const Tensor& x, const PoolGeometry& g, const Tensor& out, const Tensor& indices) {
  using C = compute_t<T>;
  const T* xp = x.data_ptr<T>();
  T* op = out.data_ptr<T>();
  int64_t* ip = indices.data_ptr<int64_t>();
  const Strides4 xs = strides_of(x), os = strides_of(out), is = strides_of(indices);
  for_each_position(out, [&](int64_t n, int64_t c, int64_t oh, int64_t ow) {
    const T* plane = xp + n * xs.n + c * xs.c;
    const int64_t h0 = max_window_start(oh, g.stride_h, g.pad_h),
                  w0 = max_window_start(ow, g.stride_w, g.pad_w);
    C best = -std::numeric_limits<C>::infinity();
    int64_t best_index = -1;
    for (int64_t kh = 0; kh < g.kernel_h; ++kh) {
      const int64_t ih = h0 + kh * g.dilation_h;
      if (ih < 0 || ih >= g.h) continue;
      for (int64_t kw = 0; kw < g.kernel_w; ++kw) {
        const int64_t iw = w0 + kw * g.dilation_w;
        if (iw < 0 || iw >= g.w) continue;
        const C v = static_cast<C>(plane[ih * xs.h + iw * xs.w]);
        if (best_index < 0 || v > best || (std::isnan(v) && !std::isnan(best))) {
          best = v;
          best_index = ih * g.w + iw;
        }
      }
    }
    op[os.at(n, c, oh, ow)] = static_cast<T>(best);
    ip[is.at(n, c, oh, ow)] = best_index;
  });
}

template <typename T>
void max_backward(const Tensor& grad, const Tensor& indices, const PoolGeometry& g,
                  const Tensor& grad_input) {
  using S = sum_t<T>;
  const T* gp = grad.data_ptr<T>();
  const int64_t* ip = indices.data_ptr<int64_t>();
  T* gi = grad_input.data_ptr<T>();
  const Strides4 gs = strides_of(grad), is = strides_of(indices), gis = strides_of(grad_input);
  for_each_position(grad_input, [&](int64_t n, int64_t c, int64_t ih, int64_t iw) {
    const Span hs = max_outputs_covering(ih, g.out_h, g.kernel_h, g.stride_h, g.pad_h, g.dilation_h);
    const Span ws = max_outputs_covering(iw, g.out_w, g.kernel_w, g.stride_w, g.pad_w, g.dilation_w);
    const int64_t self = ih * g.w + iw;
    S total = 0;
    for (int64_t oh = hs.begin; oh < hs.end; ++oh) {
      for (int64_t ow = ws.begin; ow < ws.end; ++ow) {
        if (ip[is.at(n, c, oh, ow)] == self) total += static_cast<S>(gp[gs.at(n, c, oh, ow)]);
      }
    }
    gi[gis.at(n, c, ih, iw)] = static_cast<T>(total);
  });
}

template <typename T>
void avg_forward(const Tensor& x, const PoolGeometry& g, const Tensor& out) {
  using S = sum_t<T>;
  const T* xp = x.data_ptr<T>();
  T* op = out.data_ptr<T>();
  const Strides4 xs = strides_of(x), os = strides_of(out);
  for_each_position(out, [&](int64_t n, int64_t c, int64_t oh, int64_t ow) {
    const T* plane = xp + n * xs.n + c * xs.c;
    const Span hs = avg_span(g, oh, true), ws = avg_span(g, ow, false);
    S total = 0;
    for (int64_t ih = hs.begin; ih < hs.end; ++ih) {
      for (int64_t iw = ws.begin; iw < ws.end; ++iw) total += static_cast<S>(plane[ih * xs.h + iw * xs.w]);
    }
    op[os.at(n, c, oh, ow)] = static_cast<T>(total / static_cast<S>(avg_divisor(g, oh, ow)));
  });
}

template <typename T>
void avg_backward(const Tensor& grad, const PoolGeometry& g, const Tensor& grad_input) {
  using S = sum_t<T>;
  const T* gp = grad.data_ptr<T>();
  T* gi = grad_input.data_ptr<T>();
  const Strides4 gs = strides_of(grad), gis = strides_of(grad_input);
  for_each_position(grad_input, [&](int64_t n, int64_t c, int64_t ih, int64_t iw) {
    const Span hs = avg_covering(g, ih, true), ws = avg_covering(g, iw, false);
    S total = 0;
    for (int64_t oh = hs.begin; oh < hs.end; ++oh) {
      const Span rows = avg_span(g, oh, true);
      if (ih < rows.begin || ih >= rows.end) continue;
      for (int64_t ow = ws.begin; ow < ws.end; ++ow) {
        const Span cols = avg_span(g, ow, false);
        if (iw < cols.begin || iw >= cols.end) continue;
        total += static_cast<S>(gp[gs.at(n, c, oh, ow)]) / static_cast<S>(avg_divisor(g, oh, ow));
      }
    }
    gi[gis.at(n, c, ih, iw)] = static_cast<T>(total);
  });
}

}  // namespace

void max_pool2d(const Tensor& x, const PoolGeometry& g, const Tensor& out, const Tensor& indices) {
  dispatch<TypeSet::Floating>(x.dtype(), "max_pool2d",
                              [&]<typename T>() { max_forward<T>(x, g, out, indices); });
}

void max_pool2d_backward(const Tensor& grad, const Tensor& indices, const PoolGeometry& g,
                         const Tensor& grad_input) {
  dispatch<TypeSet::Floating>(grad.dtype(), "max_pool2d_backward",
                              [&]<typename T>() { max_backward<T>(grad, indices, g, grad_input); });
}

void avg_pool2d(const Tensor& x, const PoolGeometry& g, const Tensor& out) {
  dispatch<TypeSet::Floating>(x.dtype(), "avg_pool2d", [&]<typename T>() { avg_forward<T>(x, g, out); });
}

void avg_pool2d_backward(const Tensor& grad, const PoolGeometry& g, const Tensor& grad_input) {
  dispatch<TypeSet::Floating>(grad.dtype(), "avg_pool2d_backward",
                              [&]<typename T>() { avg_backward<T>(grad, g, grad_input); });
}

}  // namespace nabla::ops::cpu
