// CUDA max, average and adaptive average pooling, forward and backward.
//
// One thread per element: forward kernels walk the output, backward kernels walk the input and
// gather the gradients of the windows that cover each element (pool_window.h), so backward needs
// no atomics and no zero-fill and gives the same sums on every run. A thread's linear position
// follows the tensors' memory order (NCHW or NHWC), so consecutive threads write consecutive
// addresses; NHWC tensors are read in place, with C fastest. Sums run in acc_t (float for the
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
template <typename Index>
struct Space {
  Index n, c, h, w;
  bool channels_last;

  __device__ __forceinline__ void coords(Index e, int64_t& ni, int64_t& ci, int64_t& hi, int64_t& wi) const {
    if (channels_last) {
      ci = e % c, e /= c;
      wi = e % w, e /= w;
      hi = e % h, ni = e / h;
    } else {
      wi = e % w, e /= w;
      hi = e % h, e /= h;
      ci = e % c, ni = e / c;
    }
  }
};

template <typename Index>
Space<Index> space_of(const Tensor& t) {
  return {static_cast<Index>(t.size(0)), static_cast<Index>(t.size(1)), static_cast<Index>(t.size(2)),
          static_cast<Index>(t.size(3)), !t.is_contiguous()};
}

#define NABLA_POOL_LOOP(e, total) \
  for (Index e = blockIdx.x * Index{blockDim.x} + threadIdx.x; e < total; e += Index{gridDim.x} * blockDim.x)

template <typename T, typename Index>
__global__ void __launch_bounds__(kBlockSize)
    max_forward_kernel(const T* __restrict__ x, T* __restrict__ out, int64_t* __restrict__ indices,
                       Space<Index> space, Index total, Strides4 xs, Strides4 os, Strides4 is,
                       PoolGeometry g) {
  using C = acc_t<T>;
  NABLA_POOL_LOOP(e, total) {
    int64_t n, c, oh, ow;
    space.coords(e, n, c, oh, ow);
    const T* plane = x + n * xs.n + c * xs.c;
    const int64_t h0 = max_window_start(oh, g.stride_h, g.pad_h),
                  w0 = max_window_start(ow, g.stride_w, g.pad_w);
    C best = C(-INFINITY);
    int64_t best_index = -1;
    for (int64_t kh = 0; kh < g.kernel_h; ++kh) {
      const int64_t ih = h0 + kh * g.dilation_h;
      if (ih < 0 || ih >= g.h) continue;
      for (int64_t kw = 0; kw < g.kernel_w; ++kw) {
        const int64_t iw = w0 + kw * g.dilation_w;
        if (iw < 0 || iw >= g.w) continue;
        const C v = load_as_acc(plane[ih * xs.h + iw * xs.w]);
        if (best_index < 0 || v > best || (isnan(v) && !isnan(best))) {
          best = v;
          best_index = ih * g.w + iw;
        }
      }
    }
    out[os.at(n, c, oh, ow)] = store_from<T>(best);
    indices[is.at(n, c, oh, ow)] = best_index;
  }
}

template <typename T, typename Index>
__global__ void __launch_bounds__(kBlockSize)
    max_backward_kernel(const T* __restrict__ grad, const int64_t* __restrict__ indices,
                        T* __restrict__ grad_input, Space<Index> space, Index total, Strides4 gs, Strides4 is,
                        Strides4 gis, PoolGeometry g) {
  using C = acc_t<T>;
  NABLA_POOL_LOOP(e, total) {
    int64_t n, c, ih, iw;
    space.coords(e, n, c, ih, iw);
    const Span hs = max_outputs_covering(ih, g.out_h, g.kernel_h, g.stride_h, g.pad_h, g.dilation_h);
    const Span ws = max_outputs_covering(iw, g.out_w, g.kernel_w, g.stride_w, g.pad_w, g.dilation_w);
    const int64_t self = ih * g.w + iw;
    C total_grad = C(0);
    for (int64_t oh = hs.begin; oh < hs.end; ++oh) {
      for (int64_t ow = ws.begin; ow < ws.end; ++ow) {
        if (indices[is.at(n, c, oh, ow)] == self) total_grad += load_as_acc(grad[gs.at(n, c, oh, ow)]);
      }
    }
    grad_input[gis.at(n, c, ih, iw)] = store_from<T>(total_grad);
  }
}

template <typename T, typename Index>
__global__ void __launch_bounds__(kBlockSize)
    avg_forward_kernel(const T* __restrict__ x, T* __restrict__ out, Space<Index> space, Index total,
                       Strides4 xs, Strides4 os, PoolGeometry g) {
  using C = acc_t<T>;
  NABLA_POOL_LOOP(e, total) {
    int64_t n, c, oh, ow;
    space.coords(e, n, c, oh, ow);
    const T* plane = x + n * xs.n + c * xs.c;
    const Span hs = avg_span(g, oh, true), ws = avg_span(g, ow, false);
    C sum = C(0);
    for (int64_t ih = hs.begin; ih < hs.end; ++ih) {
      for (int64_t iw = ws.begin; iw < ws.end; ++iw) sum += load_as_acc(plane[ih * xs.h + iw * xs.w]);
    }
    out[os.at(n, c, oh, ow)] = store_from<T>(sum / static_cast<C>(avg_divisor(g, oh, ow)));
  }
}

template <typename T, typename Index>
__global__ void __launch_bounds__(kBlockSize)
    avg_backward_kernel(const T* __restrict__ grad, T* __restrict__ grad_input, Space<Index> space,
                        Index total, Strides4 gs, Strides4 gis, PoolGeometry g) {
  using C = acc_t<T>;
  NABLA_POOL_LOOP(e, total) {
    int64_t n, c, ih, iw;
    space.coords(e, n, c, ih, iw);
    const Span hs = avg_covering(g, ih, true), ws = avg_covering(g, iw, false);
    C sum = C(0);
    for (int64_t oh = hs.begin; oh < hs.end; ++oh) {
      const Span rows = avg_span(g, oh, true);
      if (ih < rows.begin || ih >= rows.end) continue;
      for (int64_t ow = ws.begin; ow < ws.end; ++ow) {
        const Span cols = avg_span(g, ow, false);
        if (iw < cols.begin || iw >= cols.end) continue;
        sum += load_as_acc(grad[gs.at(n, c, oh, ow)]) / static_cast<C>(avg_divisor(g, oh, ow));
      }
    }
    grad_input[gis.at(n, c, ih, iw)] = store_from<T>(sum);
  }
}

#undef NABLA_POOL_LOOP

// Runs launch.template operator()<T, Index>(space, total) for the dtype of `like`, with 32-bit
// positions when the walked tensor `walk` fits, on the device of `walk`.
template <typename Launch>
void launch_over(const Tensor& walk, DType dtype, const char* op, Launch launch) {
  const int64_t total = walk.numel();
  if (total == 0) return;
  DeviceScope device(walk.device().index);
  dispatch_device<TypeSet::Floating>(dtype, op, [&]<typename T>() {
    if (total < (int64_t{1} << 31)) {
      launch.template operator()<T, uint32_t>(space_of<uint32_t>(walk), static_cast<uint32_t>(total));
    } else {
      launch.template operator()<T, uint64_t>(space_of<uint64_t>(walk), static_cast<uint64_t>(total));
    }
    NABLA_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace

void max_pool2d(const Tensor& x, const PoolGeometry& g, const Tensor& out, const Tensor& indices) {
  const cudaStream_t stream = stream_for(x);
  launch_over(out, x.dtype(), "max_pool2d", [&]<typename T, typename Index>(Space<Index> space, Index total) {
    max_forward_kernel<T, Index><<<blocks_for(total), kBlockSize, 0, stream>>>(
        static_cast<const T*>(x.data_ptr()), static_cast<T*>(out.data_ptr()),
        static_cast<int64_t*>(indices.data_ptr()), space, total, strides_of(x), strides_of(out),
        strides_of(indices), g);
  });
}

void max_pool2d_backward(const Tensor& grad, const Tensor& indices, const PoolGeometry& g,
                         const Tensor& grad_input) {
  const cudaStream_t stream = stream_for(grad);
  launch_over(grad_input, grad.dtype(), "max_pool2d_backward",
              [&]<typename T, typename Index>(Space<Index> space, Index total) {
                max_backward_kernel<T, Index><<<blocks_for(total), kBlockSize, 0, stream>>>(
                    static_cast<const T*>(grad.data_ptr()), static_cast<const int64_t*>(indices.data_ptr()),
                    static_cast<T*>(grad_input.data_ptr()), space, total, strides_of(grad),
                    strides_of(indices), strides_of(grad_input), g);
              });
}

void avg_pool2d(const Tensor& x, const PoolGeometry& g, const Tensor& out) {
  const cudaStream_t stream = stream_for(x);
  launch_over(out, x.dtype(), "avg_pool2d", [&]<typename T, typename Index>(Space<Index> space, Index total) {
    avg_forward_kernel<T, Index><<<blocks_for(total), kBlockSize, 0, stream>>>(
        static_cast<const T*>(x.data_ptr()), static_cast<T*>(out.data_ptr()), space, total, strides_of(x),
        strides_of(out), g);
  });
}

void avg_pool2d_backward(const Tensor& grad, const PoolGeometry& g, const Tensor& grad_input) {
  const cudaStream_t stream = stream_for(grad);
  launch_over(grad_input, grad.dtype(), "avg_pool2d_backward",
              [&]<typename T, typename Index>(Space<Index> space, Index total) {
                avg_backward_kernel<T, Index><<<blocks_for(total), kBlockSize, 0, stream>>>(
                    static_cast<const T*>(grad.data_ptr()), static_cast<T*>(grad_input.data_ptr()), space,
                    total, strides_of(grad), strides_of(grad_input), g);
              });
}

}  // namespace nabla::ops::cuda
