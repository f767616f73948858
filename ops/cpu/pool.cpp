// CPU max, average and adaptive average pooling, forward and backward.
//
// Every kernel computes one element at a time from the shared window geometry (pool_window.h):
// forward kernels walk the output, backward kernels walk the input and gather the gradients of
// the windows that cover each element (no scatter, so threads never write the same element).
// NCHW tensors are split over OpenMP threads by (N, C) planes; NHWC tensors by (N, H) rows, with
// C innermost, so both read and write in memory order. NCHW max pooling with disjoint windows
// has a faster path (Note [Max pool tiling fast path]). Sums accumulate in double for float32
// and float64 and in float for float16/bfloat16. Max pooling's kernels take either index format
// (MaxIndex: uint8 window offsets or int64 plane positions, Note [Compact max-pool indices] in
// ops/detail/pool_window.h); the backward compares each covering window's saved index with the
// element's own index in that window (max_index_of), so offsets never need dividing by W.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <limits>
#include <type_traits>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

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

// Note [Max pool tiling fast path]
// The usual max pool (kernel == stride, no padding, no dilation: SmallCnn's 2x2) tiles the input
// with disjoint windows. For NCHW tensors the forward then walks each plane with plain pointer
// loops (no per-element div/mod or bounds checks), and the backward zeroes grad_input and writes
// each output's gradient straight onto its argmax: every input element lies in at most one
// window, so this equals the gather's one-term sum exactly. Windows clip at the bottom/right edge
// (ceil_mode); rows and columns no window covers keep their zero gradient.
bool is_tiling(const PoolGeometry& g) {
  return g.kernel_h == g.stride_h && g.kernel_w == g.stride_w && g.pad_h == 0 && g.pad_w == 0 &&
         g.dilation_h == 1 && g.dilation_w == 1;
}

bool all_contiguous(std::initializer_list<std::reference_wrapper<const Tensor>> ts) {
  for (const Tensor& t : ts) {
    if (!t.is_contiguous()) return false;
  }
  return true;
}

// Takes v at `index` when it beats `best` by max_forward's rule (the first maximum wins, the first
// NaN beats all), without branches: random data would mispredict half of them.
template <typename C>
inline void take_if_better(C v, int64_t index, C& best, int64_t& best_index) {
  static_assert(sizeof(C) == 4 || sizeof(C) == 8);
  using Bits = std::conditional_t<sizeof(C) == 4, uint32_t, uint64_t>;
  const bool take = (v > best) | ((v != v) & (best == best));
  // Selects by masks: for `take ? v : best` GCC emits branches (SSE2 has no blend), and random
  // data mispredicts half of them.
  const int64_t mask = -static_cast<int64_t>(take);
  best_index ^= (best_index ^ index) & mask;
  Bits best_bits = std::bit_cast<Bits>(best);
  best_bits ^= (best_bits ^ std::bit_cast<Bits>(v)) & static_cast<Bits>(mask);
  best = std::bit_cast<C>(best_bits);
}

#if defined(__SSE2__)
// Four full 2x2 windows at a time for float32 (SSE2 is part of x86-64): the windows of outputs
// [0, count) of one output row, whose windows start at input row h0 of `plane`, with the same
// rule as take_if_better lane by lane. Returns how many outputs it did (a multiple of 4).
template <typename MaxIndex>
int64_t max2x2_row_sse2(const float* plane, const PoolGeometry& g, int64_t h0, int64_t count, float* out,
                        MaxIndex* indices) {
  const float* r0 = plane + h0 * g.w;
  const float* r1 = r0 + g.w;
  // Lanes carry the best tap as 2 * row + column; max_index_of stores it in MaxIndex's terms.
  const __m128i tap_b = _mm_set1_epi32(1), tap_c = _mm_set1_epi32(2), tap_d = _mm_set1_epi32(3);
  int64_t ow = 0;
  for (; ow + 4 <= count; ow += 4) {
    const __m128 lo0 = _mm_loadu_ps(r0 + 2 * ow), hi0 = _mm_loadu_ps(r0 + 2 * ow + 4);
    const __m128 lo1 = _mm_loadu_ps(r1 + 2 * ow), hi1 = _mm_loadu_ps(r1 + 2 * ow + 4);
    // Window taps: a b (top row), c d (bottom row), in the scalar path's order.
    const __m128 a = _mm_shuffle_ps(lo0, hi0, _MM_SHUFFLE(2, 0, 2, 0));
    const __m128 b = _mm_shuffle_ps(lo0, hi0, _MM_SHUFFLE(3, 1, 3, 1));
    const __m128 c = _mm_shuffle_ps(lo1, hi1, _MM_SHUFFLE(2, 0, 2, 0));
    const __m128 d = _mm_shuffle_ps(lo1, hi1, _MM_SHUFFLE(3, 1, 3, 1));
    __m128 best = a;
    __m128i tap = _mm_setzero_si128();
    auto take = [&](__m128 v, __m128i v_tap) {
      const __m128 t =
          _mm_or_ps(_mm_cmpgt_ps(v, best), _mm_and_ps(_mm_cmpunord_ps(v, v), _mm_cmpord_ps(best, best)));
      best = _mm_or_ps(_mm_and_ps(t, v), _mm_andnot_ps(t, best));
      const __m128i ti = _mm_castps_si128(t);
      tap = _mm_or_si128(_mm_and_si128(ti, v_tap), _mm_andnot_si128(ti, tap));
    };
    take(b, tap_b);
    take(c, tap_c);
    take(d, tap_d);
    _mm_storeu_ps(out + ow, best);
    alignas(16) int32_t lane[4];
    _mm_store_si128(reinterpret_cast<__m128i*>(lane), tap);
    for (int k = 0; k < 4; ++k) {
      const int64_t tap_h = lane[k] >> 1, tap_w = lane[k] & 1;
      indices[ow + k] = max_index_of<MaxIndex>(g, tap_h, tap_w, h0 + tap_h, 2 * (ow + k) + tap_w);
    }
  }
  return ow;
}
#endif

// kKernel2: the window is 2x2 (SmallCnn's pool), unrolled; otherwise the geometry's kernel. The
// scalar loops carry the best tap's index in int64 for take_if_better's masks and store it as
// MaxIndex.
template <typename T, typename MaxIndex, bool kKernel2>
void max_forward_tiling(const Tensor& x, const PoolGeometry& g, const Tensor& out, const Tensor& indices) {
  using C = compute_t<T>;
  const T* xp = x.data_ptr<T>();
  T* op = out.data_ptr<T>();
  MaxIndex* ip = indices.data_ptr<MaxIndex>();
  const int64_t planes = g.n * g.c, in_plane = g.h * g.w, out_plane = g.out_h * g.out_w;
#pragma omp parallel for schedule(static) if (x.numel() > kParallelGrain && !omp_in_parallel())
  for (int64_t plane = 0; plane < planes; ++plane) {
    const T* xplane = xp + plane * in_plane;
    T* oplane = op + plane * out_plane;
    MaxIndex* iplane = ip + plane * out_plane;
    for (int64_t oh = 0; oh < g.out_h; ++oh) {
      const int64_t h0 = oh * g.stride_h, h1 = std::min(h0 + g.kernel_h, g.h);
      int64_t ow = 0;
#if defined(__SSE2__)
      if constexpr (kKernel2 && std::is_same_v<T, float>) {
        if (h1 - h0 == 2) {  // windows that are whole (ceil_mode may clip the last)
          ow = max2x2_row_sse2(xplane, g, h0, std::min(g.out_w, g.w / 2), oplane + oh * g.out_w,
                               iplane + oh * g.out_w);
        }
      }
#endif
      for (; ow < g.out_w; ++ow) {
        const int64_t w0 = ow * g.stride_w, w1 = std::min(w0 + g.kernel_w, g.w);
        const int64_t first = h0 * g.w + w0;
        auto index_of = [&](int64_t ih, int64_t iw) {
          return static_cast<int64_t>(max_index_of<MaxIndex>(g, ih - h0, iw - w0, ih, iw));
        };
        C best = static_cast<C>(xplane[first]);
        int64_t best_index = index_of(h0, w0);
        if (kKernel2 && h1 - h0 == 2 && w1 - w0 == 2) {
          take_if_better(static_cast<C>(xplane[first + 1]), index_of(h0, w0 + 1), best, best_index);
          take_if_better(static_cast<C>(xplane[first + g.w]), index_of(h0 + 1, w0), best, best_index);
          take_if_better(static_cast<C>(xplane[first + g.w + 1]), index_of(h0 + 1, w0 + 1), best, best_index);
        } else {
          // Revisiting the first tap changes nothing: it neither beats itself nor is a new NaN.
          for (int64_t ih = h0; ih < h1; ++ih) {
            for (int64_t iw = w0; iw < w1; ++iw) {
              take_if_better(static_cast<C>(xplane[ih * g.w + iw]), index_of(ih, iw), best, best_index);
            }
          }
        }
        oplane[oh * g.out_w + ow] = static_cast<T>(best);
        iplane[oh * g.out_w + ow] = static_cast<MaxIndex>(best_index);
      }
    }
  }
}

template <typename T, typename MaxIndex>
void max_backward_tiling(const Tensor& grad, const Tensor& indices, const PoolGeometry& g,
                         const Tensor& grad_input) {
  const T* gp = grad.data_ptr<T>();
  const MaxIndex* ip = indices.data_ptr<MaxIndex>();
  T* gi = grad_input.data_ptr<T>();
  const int64_t planes = g.n * g.c, in_plane = g.h * g.w, out_plane = g.out_h * g.out_w;
#pragma omp parallel for schedule(static) if (grad_input.numel() > kParallelGrain && !omp_in_parallel())
  for (int64_t plane = 0; plane < planes; ++plane) {
    T* giplane = gi + plane * in_plane;
    std::fill_n(giplane, in_plane, T(0));
    const T* gplane = gp + plane * out_plane;
    const MaxIndex* iplane = ip + plane * out_plane;
    for (int64_t oh = 0; oh < g.out_h; ++oh) {
      for (int64_t ow = 0; ow < g.out_w; ++ow) {
        const int64_t o = oh * g.out_w + ow;
        const int64_t at = max_index_position(g, oh, ow, iplane[o]);
        if (at >= 0 && at < in_plane) giplane[at] = gplane[o];
      }
    }
  }
}

template <typename T, typename MaxIndex>
void max_forward(const Tensor& x, const PoolGeometry& g, const Tensor& out, const Tensor& indices) {
  if (is_tiling(g) && all_contiguous({x, out, indices})) {
    const bool kernel2 = g.kernel_h == 2 && g.kernel_w == 2;
    return kernel2 ? max_forward_tiling<T, MaxIndex, true>(x, g, out, indices)
                   : max_forward_tiling<T, MaxIndex, false>(x, g, out, indices);
  }
  using C = compute_t<T>;
  const T* xp = x.data_ptr<T>();
  T* op = out.data_ptr<T>();
  MaxIndex* ip = indices.data_ptr<MaxIndex>();
  const Strides4 xs = strides_of(x), os = strides_of(out), is = strides_of(indices);
  for_each_position(out, [&](int64_t n, int64_t c, int64_t oh, int64_t ow) {
    const T* plane = xp + n * xs.n + c * xs.c;
    const int64_t h0 = max_window_start(oh, g.stride_h, g.pad_h),
                  w0 = max_window_start(ow, g.stride_w, g.pad_w);
    C best = -std::numeric_limits<C>::infinity();
    MaxIndex best_index = no_max_index<MaxIndex>();
    bool found = false;  // the first tap inside the input is taken whatever it holds
    for (int64_t kh = 0; kh < g.kernel_h; ++kh) {
      const int64_t ih = h0 + kh * g.dilation_h;
      if (ih < 0 || ih >= g.h) continue;
      for (int64_t kw = 0; kw < g.kernel_w; ++kw) {
        const int64_t iw = w0 + kw * g.dilation_w;
        if (iw < 0 || iw >= g.w) continue;
        const C v = static_cast<C>(plane[ih * xs.h + iw * xs.w]);
        if (!found || v > best || (std::isnan(v) && !std::isnan(best))) {
          best = v;
          best_index = max_index_of<MaxIndex>(g, kh, kw, ih, iw);
          found = true;
        }
      }
    }
    op[os.at(n, c, oh, ow)] = static_cast<T>(best);
    ip[is.at(n, c, oh, ow)] = best_index;
  });
}

template <typename T, typename MaxIndex>
void max_backward(const Tensor& grad, const Tensor& indices, const PoolGeometry& g,
                  const Tensor& grad_input) {
  if (is_tiling(g) && all_contiguous({grad, indices, grad_input})) {
    return max_backward_tiling<T, MaxIndex>(grad, indices, g, grad_input);
  }
  using S = sum_t<T>;
  const T* gp = grad.data_ptr<T>();
  const MaxIndex* ip = indices.data_ptr<MaxIndex>();
  T* gi = grad_input.data_ptr<T>();
  const Strides4 gs = strides_of(grad), is = strides_of(indices), gis = strides_of(grad_input);
  for_each_position(grad_input, [&](int64_t n, int64_t c, int64_t ih, int64_t iw) {
    const Span hs = max_outputs_covering(ih, g.out_h, g.kernel_h, g.stride_h, g.pad_h, g.dilation_h);
    const Span ws = max_outputs_covering(iw, g.out_w, g.kernel_w, g.stride_w, g.pad_w, g.dilation_w);
    S total = 0;
    for (int64_t oh = hs.begin; oh < hs.end; ++oh) {
      const int64_t tap_h = max_tap_at(ih, oh, g.stride_h, g.pad_h, g.dilation_h);
      if (tap_h < 0) continue;  // the dilation steps over row ih in this window
      for (int64_t ow = ws.begin; ow < ws.end; ++ow) {
        const int64_t tap_w = max_tap_at(iw, ow, g.stride_w, g.pad_w, g.dilation_w);
        if (tap_w < 0) continue;
        if (ip[is.at(n, c, oh, ow)] == max_index_of<MaxIndex>(g, tap_h, tap_w, ih, iw)) {
          total += static_cast<S>(gp[gs.at(n, c, oh, ow)]);
        }
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
  dispatch<TypeSet::Floating>(x.dtype(), "max_pool2d", [&]<typename T>() {
    dispatch_max_index(indices.dtype(),
                       [&]<typename MaxIndex>() { max_forward<T, MaxIndex>(x, g, out, indices); });
  });
}

void max_pool2d_backward(const Tensor& grad, const Tensor& indices, const PoolGeometry& g,
                         const Tensor& grad_input) {
  dispatch<TypeSet::Floating>(grad.dtype(), "max_pool2d_backward", [&]<typename T>() {
    dispatch_max_index(indices.dtype(),
                       [&]<typename MaxIndex>() { max_backward<T, MaxIndex>(grad, indices, g, grad_input); });
  });
}

void max_pool2d_positions(const Tensor& offsets, const PoolGeometry& g, const Tensor& positions) {
  const uint8_t* op = offsets.data_ptr<uint8_t>();
  int64_t* pp = positions.data_ptr<int64_t>();
  const Strides4 os = strides_of(offsets), ps = strides_of(positions);
  for_each_position(positions, [&](int64_t n, int64_t c, int64_t oh, int64_t ow) {
    pp[ps.at(n, c, oh, ow)] = max_index_position(g, oh, ow, op[os.at(n, c, oh, ow)]);
  });
}

void avg_pool2d(const Tensor& x, const PoolGeometry& g, const Tensor& out) {
  dispatch<TypeSet::Floating>(x.dtype(), "avg_pool2d", [&]<typename T>() { avg_forward<T>(x, g, out); });
}

void avg_pool2d_backward(const Tensor& grad, const PoolGeometry& g, const Tensor& grad_input) {
  dispatch<TypeSet::Floating>(grad.dtype(), "avg_pool2d_backward",
                              [&]<typename T>() { avg_backward<T>(grad, g, grad_input); });
}

}  // namespace nabla::ops::cpu
