// CUDA max, average and adaptive average pooling, forward and backward.
//
// One thread per element: forward kernels walk the output, backward kernels walk the input and
// gather the gradients of the windows that cover each element (pool_window.h), so backward needs
// no atomics and no zero-fill and gives the same sums on every run. A thread's linear position
// follows the tensors' memory order (NCHW or NHWC), so consecutive threads write consecutive
// addresses; NHWC tensors are read in place, with C fastest. Sums run in opmath_t (float for the
// 16-bit types) and round once on store.
#include <cmath>

#include "nabla/ops/cuda/common.cuh"
#include "nabla/ops/cuda/elementwise.cuh"
#include "nabla/ops/cuda/pool_kernels.h"

namespace nabla::ops::cuda {

namespace {

struct Strides4 {
  int64_t n, c, h, w;
  __device__ __forceinline__ int64_t at(int64_t ni, int64_t ci, int64_t hi, int64_t wi) const {
    return ni * n + ci * c + hi * h + wi * w;
  }
};

Strides4 strides_of(const Tensor& t) {
  return {t.stride(0), t.stride(1), t.stride(2), t.stride(3)};
}

// The (N, C, H, W) space of the tensor a kernel walks, and its memory order.
// In NHWC, a max-pooling thread takes `group` neighbouring channels (c counts groups), which share
// all of its index arithmetic; the other kernels take one element each (group 1).
template <typename Index>
struct Space {
  Index n, c, h, w;
  bool channels_last;
  int group;
};

template <typename Index>
Space<Index> space_of(const Tensor& t, int group) {
  return {static_cast<Index>(t.size(0)),
          static_cast<Index>(t.size(1) / group),
          static_cast<Index>(t.size(2)),
          static_cast<Index>(t.size(3)),
          !t.is_contiguous(),
          group};
}

constexpr int kMaxGroup = 8;

#define NABLA_POOL_LOOP(e, total) \
  for (Index e = blockIdx.x * Index{blockDim.x} + threadIdx.x; e < total; e += Index{gridDim.x} * blockDim.x)

// The (n, c, y, x) of linear position e in `space`: n and c in Index, y and x in I (the
// geometry's integer type).
template <typename Index, typename I>
__device__ __forceinline__ void coords_of(const Space<Index>& space, Index e, Index& n, Index& c, I& y,
                                          I& x) {
  if (space.channels_last) {
    c = e % space.c, e /= space.c;
    x = static_cast<I>(e % space.w), e /= space.w;
    y = static_cast<I>(e % space.h), n = e / space.h;
  } else {
    x = static_cast<I>(e % space.w), e /= space.w;
    y = static_cast<I>(e % space.h), e /= space.h;
    c = e % space.c, n = e / space.c;
  }
}

// The start of plane (n, c) of a tensor with strides s. Memory offsets are always 64-bit.
template <typename T, typename Index>
__device__ __forceinline__ T* plane_of(T* base, const Strides4& s, Index n, Index c) {
  return base + static_cast<int64_t>(n) * s.n + static_cast<int64_t>(c) * s.c;
}
template <typename I>
__device__ __forceinline__ int64_t offset_in_plane(const Strides4& s, I y, I x) {
  return static_cast<int64_t>(y) * s.h + static_cast<int64_t>(x) * s.w;
}

// I is int unless a size is too large for int (PoolGeometryT, narrow_geometry): 64-bit division,
// which the GPU emulates in dozens of instructions, had made these kernels compute-bound (ResNet-50's
// stem max pool at batch 256, fp16 NHWC: 1.3 ms forward and 3.7 ms backward, for about 0.3 ms of
// memory traffic each).
template <typename T, typename Index, typename I>
__global__ void __launch_bounds__(kBlockSize)
    max_forward_kernel(const T* __restrict__ x, T* __restrict__ out, int64_t* __restrict__ indices,
                       Space<Index> space, Index total, Strides4 xs, Strides4 os, Strides4 is,
                       PoolGeometryT<I> g) {
  using C = opmath_t<T>;
  NABLA_POOL_LOOP(e, total) {
    Index n, group;
    I oh, ow;
    coords_of(space, e, n, group, oh, ow);
    const Index c0 = group * static_cast<Index>(space.group);
    const T* plane = plane_of(x, xs, n, c0);
    const I h0 = max_window_start(oh, g.stride_h, g.pad_h), w0 = max_window_start(ow, g.stride_w, g.pad_w);
    C best[kMaxGroup];
    int64_t best_index[kMaxGroup];
#pragma unroll
    for (int k = 0; k < kMaxGroup; ++k) {
      best[k] = C(-INFINITY);
      best_index[k] = -1;
    }
    for (I kh = 0; kh < g.kernel_h; ++kh) {
      const I ih = h0 + kh * g.dilation_h;
      if (ih < 0 || ih >= g.h) continue;
      for (I kw = 0; kw < g.kernel_w; ++kw) {
        const I iw = w0 + kw * g.dilation_w;
        if (iw < 0 || iw >= g.w) continue;
        const T* tap = plane + offset_in_plane(xs, ih, iw);
        const int64_t where = static_cast<int64_t>(ih) * g.w + iw;
#pragma unroll
        for (int k = 0; k < kMaxGroup; ++k) {
          if (k >= space.group) break;
          const C v = load_as_opmath(tap[k * xs.c]);
          if (best_index[k] < 0 || v > best[k] || (isnan(v) && !isnan(best[k]))) {
            best[k] = v;
            best_index[k] = where;
          }
        }
      }
    }
    T* o = out + os.at(n, c0, oh, ow);
    int64_t* ix = indices + is.at(n, c0, oh, ow);
#pragma unroll
    for (int k = 0; k < kMaxGroup; ++k) {
      if (k >= space.group) break;
      o[k * os.c] = store_from<T>(best[k]);
      ix[k * is.c] = best_index[k];
    }
  }
}

template <typename T, typename Index, typename I>
__global__ void __launch_bounds__(kBlockSize)
    max_backward_kernel(const T* __restrict__ grad, const int64_t* __restrict__ indices,
                        T* __restrict__ grad_input, Space<Index> space, Index total, Strides4 gs, Strides4 is,
                        Strides4 gis, PoolGeometryT<I> g) {
  using C = opmath_t<T>;
  NABLA_POOL_LOOP(e, total) {
    Index n, group;
    I ih, iw;
    coords_of(space, e, n, group, ih, iw);
    const Index c0 = group * static_cast<Index>(space.group);
    const SpanT<I> hs = max_outputs_covering(ih, g.out_h, g.kernel_h, g.stride_h, g.pad_h, g.dilation_h);
    const SpanT<I> ws = max_outputs_covering(iw, g.out_w, g.kernel_w, g.stride_w, g.pad_w, g.dilation_w);
    const int64_t self = static_cast<int64_t>(ih) * g.w + iw;
    const int64_t* index_plane = plane_of(indices, is, n, c0);
    const T* grad_plane = plane_of(grad, gs, n, c0);
    C sum[kMaxGroup];
#pragma unroll
    for (int k = 0; k < kMaxGroup; ++k) sum[k] = C(0);
    for (I oh = hs.begin; oh < hs.end; ++oh) {
      for (I ow = ws.begin; ow < ws.end; ++ow) {
        const int64_t* ix = index_plane + offset_in_plane(is, oh, ow);
        const T* gr = grad_plane + offset_in_plane(gs, oh, ow);
#pragma unroll
        for (int k = 0; k < kMaxGroup; ++k) {
          if (k >= space.group) break;
          if (ix[k * is.c] == self) sum[k] += load_as_opmath(gr[k * gs.c]);
        }
      }
    }
    T* gi = grad_input + gis.at(n, c0, ih, iw);
#pragma unroll
    for (int k = 0; k < kMaxGroup; ++k) {
      if (k >= space.group) break;
      gi[k * gis.c] = store_from<T>(sum[k]);
    }
  }
}

template <typename T, typename Index, typename I>
__global__ void __launch_bounds__(kBlockSize)
    avg_forward_kernel(const T* __restrict__ x, T* __restrict__ out, Space<Index> space, Index total,
                       Strides4 xs, Strides4 os, PoolGeometryT<I> g) {
  using C = opmath_t<T>;
  NABLA_POOL_LOOP(e, total) {
    Index n, c;
    I oh, ow;
    coords_of(space, e, n, c, oh, ow);
    const T* plane = plane_of(x, xs, n, c);
    const SpanT<I> hs = avg_span(g, oh, true), ws = avg_span(g, ow, false);
    C sum = C(0);
    for (I ih = hs.begin; ih < hs.end; ++ih) {
      for (I iw = ws.begin; iw < ws.end; ++iw) sum += load_as_opmath(plane[offset_in_plane(xs, ih, iw)]);
    }
    out[os.at(n, c, oh, ow)] = store_from<T>(sum / static_cast<C>(avg_divisor(g, oh, ow)));
  }
}

template <typename T, typename Index, typename I>
__global__ void __launch_bounds__(kBlockSize)
    avg_backward_kernel(const T* __restrict__ grad, T* __restrict__ grad_input, Space<Index> space,
                        Index total, Strides4 gs, Strides4 gis, PoolGeometryT<I> g) {
  using C = opmath_t<T>;
  NABLA_POOL_LOOP(e, total) {
    Index n, c;
    I ih, iw;
    coords_of(space, e, n, c, ih, iw);
    const SpanT<I> hs = avg_covering(g, ih, true), ws = avg_covering(g, iw, false);
    const T* grad_plane = plane_of(grad, gs, n, c);
    C sum = C(0);
    for (I oh = hs.begin; oh < hs.end; ++oh) {
      const SpanT<I> rows = avg_span(g, oh, true);
      if (ih < rows.begin || ih >= rows.end) continue;
      for (I ow = ws.begin; ow < ws.end; ++ow) {
        const SpanT<I> cols = avg_span(g, ow, false);
        if (iw < cols.begin || iw >= cols.end) continue;
        sum +=
            load_as_opmath(grad_plane[offset_in_plane(gs, oh, ow)]) / static_cast<C>(avg_divisor(g, oh, ow));
      }
    }
    grad_input[gis.at(n, c, ih, iw)] = store_from<T>(sum);
  }
}

#undef NABLA_POOL_LOOP

// Runs launch.template operator()<T, Index, I>(space, total, geometry) for the dtype of `like`,
// with 32-bit positions when the walked tensor `walk` fits and the geometry in int when it fits
// (narrow_geometry), on the device of `walk`.
template <typename Launch>
void launch_over(const Tensor& walk, DType dtype, const PoolGeometry& g, const char* op, Launch launch,
                 bool channel_groups = false) {
  if (walk.numel() == 0) return;
  // NHWC with channels in eights: a thread per 8 channels (Space).
  const int group = channel_groups && !walk.is_contiguous() && walk.size(1) % kMaxGroup == 0 ? kMaxGroup : 1;
  const int64_t total = walk.numel() / group;
  DeviceScope device(walk.device().index);
  PoolGeometryT<int> g32;
  const bool narrow = narrow_geometry(g, &g32);
  dispatch_device<TypeSet::Floating>(dtype, op, [&]<typename T>() {
    auto with_index = [&]<typename Index>() {
      if (narrow) {
        launch.template operator()<T, Index, int>(space_of<Index>(walk, group), static_cast<Index>(total),
                                                  g32);
      } else {
        launch.template operator()<T, Index, int64_t>(space_of<Index>(walk, group), static_cast<Index>(total),
                                                      g);
      }
    };
    if (total < (int64_t{1} << 31)) {
      with_index.template operator()<uint32_t>();
    } else {
      with_index.template operator()<uint64_t>();
    }
    NABLA_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace

void max_pool2d(const Tensor& x, const PoolGeometry& g, const Tensor& out, const Tensor& indices) {
  const cudaStream_t stream = stream_for(x);
  launch_over(
      out, x.dtype(), g, "max_pool2d",
      [&]<typename T, typename Index, typename I>(Space<Index> space, Index total, PoolGeometryT<I> geo) {
        max_forward_kernel<T, Index, I><<<blocks_for(total), kBlockSize, 0, stream>>>(
            static_cast<const T*>(x.data_ptr()), static_cast<T*>(out.data_ptr()),
            static_cast<int64_t*>(indices.data_ptr()), space, total, strides_of(x), strides_of(out),
            strides_of(indices), geo);
      },
      /*channel_groups=*/true);
}

void max_pool2d_backward(const Tensor& grad, const Tensor& indices, const PoolGeometry& g,
                         const Tensor& grad_input) {
  const cudaStream_t stream = stream_for(grad);
  launch_over(
      grad_input, grad.dtype(), g, "max_pool2d_backward",
      [&]<typename T, typename Index, typename I>(Space<Index> space, Index total, PoolGeometryT<I> geo) {
        max_backward_kernel<T, Index, I><<<blocks_for(total), kBlockSize, 0, stream>>>(
            static_cast<const T*>(grad.data_ptr()), static_cast<const int64_t*>(indices.data_ptr()),
            static_cast<T*>(grad_input.data_ptr()), space, total, strides_of(grad), strides_of(indices),
            strides_of(grad_input), geo);
      },
      /*channel_groups=*/true);
}

void avg_pool2d(const Tensor& x, const PoolGeometry& g, const Tensor& out) {
  const cudaStream_t stream = stream_for(x);
  launch_over(
      out, x.dtype(), g, "avg_pool2d",
      [&]<typename T, typename Index, typename I>(Space<Index> space, Index total, PoolGeometryT<I> geo) {
        avg_forward_kernel<T, Index, I><<<blocks_for(total), kBlockSize, 0, stream>>>(
            static_cast<const T*>(x.data_ptr()), static_cast<T*>(out.data_ptr()), space, total, strides_of(x),
            strides_of(out), geo);
      });
}

void avg_pool2d_backward(const Tensor& grad, const PoolGeometry& g, const Tensor& grad_input) {
  const cudaStream_t stream = stream_for(grad);
  launch_over(
      grad_input, grad.dtype(), g, "avg_pool2d_backward",
      [&]<typename T, typename Index, typename I>(Space<Index> space, Index total, PoolGeometryT<I> geo) {
        avg_backward_kernel<T, Index, I><<<blocks_for(total), kBlockSize, 0, stream>>>(
            static_cast<const T*>(grad.data_ptr()), static_cast<T*>(grad_input.data_ptr()), space, total,
            strides_of(grad), strides_of(grad_input), geo);
      });
}

}  // namespace nabla::ops::cuda
