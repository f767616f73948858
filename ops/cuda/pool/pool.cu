// CUDA max, average and adaptive average pooling, forward and backward.
//
// One thread per element: forward kernels walk the output, backward kernels walk the input and
// gather the gradients of the windows that cover each element (pool_window.h), so backward needs
// no atomics and no zero-fill and gives the same sums on every run. A thread's linear position
// follows the tensors' memory order (NCHW or NHWC), so consecutive threads write consecutive
// addresses; NHWC tensors are read in place, with C fastest. Sums run in opmath_t (float for the
// 16-bit types) and round once on store.
//
// In NHWC with C % 8 == 0 a thread takes a group of 8 neighbouring channels, which share all of
// its window arithmetic; where every operand's groups are aligned (packable), a group moves as
// packed vectors: one 16-byte load or store for 8 fp16 values, 8 bytes for 8 uint8 indices.
//
// Why (ResNet-50 training, batch 256, fp16 NHWC): the stem max pool of (256, 64, 112, 112) took
// several times its ideal memory time forward and backward, mostly moving int64 indices (411 MB
// written, then read up to 4 times). So its autograd path saves uint8 window offsets, 51 MB
// (Note [Compact max-pool indices] in pool_window.h), and the backward skips the gradient loads
// of windows whose max is elsewhere for all 8 channels. The global average pool's backward on
// (256, 2048, 7, 7) took many times what its 51 MB write needs: each element ran a dozen integer
// divisions for its covering windows and divisor. So global pooling's backward broadcasts
// grad / (H * W) (global_avg_backward_kernel), with the same float arithmetic as the general
// kernel.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>

#include "nabla/ops/cuda/common.cuh"
#include "nabla/ops/cuda/elementwise/elementwise.cuh"
#include "nabla/ops/cuda/pool/kernels.h"

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

// The (N, C, H, W) space of the tensor a kernel walks, and its memory order. With channel
// groups a thread takes `group` neighbouring channels (c counts groups); otherwise group is 1.
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

// A group of U in pieces of at most 16 bytes (the widest load): one piece of 8 fp16 or uint8
// values, two of float, four of double or int64.
template <typename U>
struct GroupPack {
  static constexpr int kWidth =
      static_cast<int>(16 / sizeof(U)) < kMaxGroup ? static_cast<int>(16 / sizeof(U)) : kMaxGroup;
  struct alignas(sizeof(U) * kWidth) Piece {
    U v[kWidth];
  };
};

// Whether t's channel groups can move as packed pieces: channel stride 1, and every group's
// start aligned to a piece (the data pointer, and the strides of the dims that step).
bool packable(const Tensor& t) {
  const int64_t piece = std::min<int64_t>(16, kMaxGroup * static_cast<int64_t>(itemsize(t.dtype())));
  if (t.stride(1) != 1 || reinterpret_cast<uintptr_t>(t.data_ptr()) % piece != 0) return false;
  for (int d : {0, 2, 3}) {
    if (t.size(d) > 1 && t.stride(d) % kMaxGroup != 0) return false;
  }
  return true;
}

// The channels of a group at p (channel k at p[k * stride]): when kPacked, all kMaxGroup of them
// as packed pieces (stride 1 and alignment checked on the host by packable()); else the first
// `count` one by one.
template <bool kPacked, typename U>
__device__ __forceinline__ void load_group(const U* p, int64_t stride, int count, U (&v)[kMaxGroup]) {
  if constexpr (kPacked) {
    using Pack = GroupPack<U>;
#pragma unroll
    for (int j = 0; j < kMaxGroup / Pack::kWidth; ++j) {
      const typename Pack::Piece piece = reinterpret_cast<const typename Pack::Piece*>(p)[j];
#pragma unroll
      for (int k = 0; k < Pack::kWidth; ++k) v[j * Pack::kWidth + k] = piece.v[k];
    }
  } else {
#pragma unroll
    for (int k = 0; k < kMaxGroup; ++k) {
      if (k >= count) break;
      v[k] = p[k * stride];
    }
  }
}

template <bool kPacked, typename U>
__device__ __forceinline__ void store_group(U* p, int64_t stride, int count, const U (&v)[kMaxGroup]) {
  if constexpr (kPacked) {
    using Pack = GroupPack<U>;
#pragma unroll
    for (int j = 0; j < kMaxGroup / Pack::kWidth; ++j) {
      typename Pack::Piece piece;
#pragma unroll
      for (int k = 0; k < Pack::kWidth; ++k) piece.v[k] = v[j * Pack::kWidth + k];
      reinterpret_cast<typename Pack::Piece*>(p)[j] = piece;
    }
  } else {
#pragma unroll
    for (int k = 0; k < kMaxGroup; ++k) {
      if (k >= count) break;
      p[k * stride] = v[k];
    }
  }
}

// load_group and store_group for values of T that compute in opmath_t.
template <bool kPacked, typename T>
__device__ __forceinline__ void load_group_as_opmath(const T* p, int64_t stride, int count,
                                                     opmath_t<T> (&v)[kMaxGroup]) {
  T raw[kMaxGroup];
  load_group<kPacked>(p, stride, count, raw);
#pragma unroll
  for (int k = 0; k < kMaxGroup; ++k) {
    if (k >= count) break;
    v[k] = load_as_opmath(raw[k]);
  }
}

template <bool kPacked, typename T>
__device__ __forceinline__ void store_group_from_opmath(T* p, int64_t stride, int count,
                                                        const opmath_t<T> (&v)[kMaxGroup]) {
  T raw[kMaxGroup];
#pragma unroll
  for (int k = 0; k < kMaxGroup; ++k) {
    if (k >= count) break;
    raw[k] = store_from<T>(v[k]);
  }
  store_group<kPacked>(p, stride, count, raw);
}

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
// which the GPU emulates in dozens of instructions, makes these kernels compute-bound (ResNet-50's
// stem max pool at batch 256, fp16 NHWC, took about 4x the time of its memory traffic forward and
// 12x backward). MaxIndex: uint8_t window offsets or int64_t plane positions.
template <typename T, typename MaxIndex, typename Index, typename I, bool kPacked>
__global__ void __launch_bounds__(kBlockSize)
    max_forward_kernel(const T* __restrict__ x, T* __restrict__ out, MaxIndex* __restrict__ indices,
                       Space<Index> space, Index total, Strides4 xs, Strides4 os, Strides4 is,
                       PoolGeometryT<I> g) {
  using C = opmath_t<T>;
  const int count = kPacked ? kMaxGroup : space.group;
  NABLA_POOL_LOOP(e, total) {
    Index n, group;
    I oh, ow;
    coords_of(space, e, n, group, oh, ow);
    const Index c0 = group * static_cast<Index>(space.group);
    const T* plane = plane_of(x, xs, n, c0);
    const I h0 = max_window_start(oh, g.stride_h, g.pad_h), w0 = max_window_start(ow, g.stride_w, g.pad_w);
    C best[kMaxGroup];
    MaxIndex best_index[kMaxGroup];
#pragma unroll
    for (int k = 0; k < kMaxGroup; ++k) {
      best[k] = C(-INFINITY);
      best_index[k] = no_max_index<MaxIndex>();
    }
    bool found = false;  // the first tap inside the input is taken whatever it holds
    for (I kh = 0; kh < g.kernel_h; ++kh) {
      const I ih = h0 + kh * g.dilation_h;
      if (ih < 0 || ih >= g.h) continue;
      for (I kw = 0; kw < g.kernel_w; ++kw) {
        const I iw = w0 + kw * g.dilation_w;
        if (iw < 0 || iw >= g.w) continue;
        C tap[kMaxGroup];
        load_group_as_opmath<kPacked>(plane + offset_in_plane(xs, ih, iw), xs.c, count, tap);
        const MaxIndex here = max_index_of<MaxIndex>(g, kh, kw, ih, iw);
#pragma unroll
        for (int k = 0; k < kMaxGroup; ++k) {
          if (k >= count) break;
          if (!found || tap[k] > best[k] || (isnan(tap[k]) && !isnan(best[k]))) {
            best[k] = tap[k];
            best_index[k] = here;
          }
        }
        found = true;
      }
    }
    store_group_from_opmath<kPacked>(out + os.at(n, c0, oh, ow), os.c, count, best);
    store_group<kPacked>(indices + is.at(n, c0, oh, ow), is.c, count, best_index);
  }
}

// Each covering window (oh, ow) adds its gradient where its saved index is the element's own
// index in that window (max_index_of); the sums run over the windows in the same order as ever.
template <typename T, typename MaxIndex, typename Index, typename I, bool kPacked>
__global__ void __launch_bounds__(kBlockSize)
    max_backward_kernel(const T* __restrict__ grad, const MaxIndex* __restrict__ indices,
                        T* __restrict__ grad_input, Space<Index> space, Index total, Strides4 gs, Strides4 is,
                        Strides4 gis, PoolGeometryT<I> g) {
  using C = opmath_t<T>;
  const int count = kPacked ? kMaxGroup : space.group;
  NABLA_POOL_LOOP(e, total) {
    Index n, group;
    I ih, iw;
    coords_of(space, e, n, group, ih, iw);
    const Index c0 = group * static_cast<Index>(space.group);
    const SpanT<I> hs = max_outputs_covering(ih, g.out_h, g.kernel_h, g.stride_h, g.pad_h, g.dilation_h);
    const SpanT<I> ws = max_outputs_covering(iw, g.out_w, g.kernel_w, g.stride_w, g.pad_w, g.dilation_w);
    const MaxIndex* index_plane = plane_of(indices, is, n, c0);
    const T* grad_plane = plane_of(grad, gs, n, c0);
    C sum[kMaxGroup];
#pragma unroll
    for (int k = 0; k < kMaxGroup; ++k) sum[k] = C(0);
    for (I oh = hs.begin; oh < hs.end; ++oh) {
      const I tap_h = max_tap_at(ih, oh, g.stride_h, g.pad_h, g.dilation_h);
      if (tap_h < 0) continue;  // the dilation steps over row ih in this window
      for (I ow = ws.begin; ow < ws.end; ++ow) {
        const I tap_w = max_tap_at(iw, ow, g.stride_w, g.pad_w, g.dilation_w);
        if (tap_w < 0) continue;
        const MaxIndex self = max_index_of<MaxIndex>(g, tap_h, tap_w, ih, iw);
        MaxIndex saved[kMaxGroup];
        load_group<kPacked>(index_plane + offset_in_plane(is, oh, ow), is.c, count, saved);
        bool hit[kMaxGroup];
        bool any = false;
#pragma unroll
        for (int k = 0; k < kMaxGroup; ++k) {
          if (k >= count) break;
          hit[k] = saved[k] == self;
          any = any || hit[k];
        }
        if (!any) continue;  // the window's max is elsewhere in every channel: its gradient adds nothing
        C gr[kMaxGroup];
        load_group_as_opmath<kPacked>(grad_plane + offset_in_plane(gs, oh, ow), gs.c, count, gr);
#pragma unroll
        for (int k = 0; k < kMaxGroup; ++k) {
          if (k >= count) break;
          if (hit[k]) sum[k] += gr[k];
        }
      }
    }
    store_group_from_opmath<kPacked>(grad_input + gis.at(n, c0, ih, iw), gis.c, count, sum);
  }
}

// Window offsets to plane positions, for max pooling's double backward: a rare path, so one
// element per thread in 64-bit arithmetic.
__global__ void __launch_bounds__(kBlockSize)
    max_positions_kernel(const uint8_t* __restrict__ offsets, int64_t* __restrict__ positions,
                         Space<uint64_t> space, uint64_t total, Strides4 os, Strides4 ps, PoolGeometry g) {
  using Index = uint64_t;
  NABLA_POOL_LOOP(e, total) {
    Index n, c;
    int64_t oh, ow;
    coords_of(space, e, n, c, oh, ow);
    positions[ps.at(n, c, oh, ow)] = max_index_position(g, oh, ow, offsets[os.at(n, c, oh, ow)]);
  }
}

template <typename T, typename Index, typename I, bool kPacked>
__global__ void __launch_bounds__(kBlockSize)
    avg_forward_kernel(const T* __restrict__ x, T* __restrict__ out, Space<Index> space, Index total,
                       Strides4 xs, Strides4 os, PoolGeometryT<I> g) {
  using C = opmath_t<T>;
  const int count = kPacked ? kMaxGroup : space.group;
  NABLA_POOL_LOOP(e, total) {
    Index n, group;
    I oh, ow;
    coords_of(space, e, n, group, oh, ow);
    const Index c0 = group * static_cast<Index>(space.group);
    const T* plane = plane_of(x, xs, n, c0);
    const SpanT<I> hs = avg_span(g, oh, true), ws = avg_span(g, ow, false);
    C sum[kMaxGroup];
#pragma unroll
    for (int k = 0; k < kMaxGroup; ++k) sum[k] = C(0);
    for (I ih = hs.begin; ih < hs.end; ++ih) {
      for (I iw = ws.begin; iw < ws.end; ++iw) {
        C tap[kMaxGroup];
        load_group_as_opmath<kPacked>(plane + offset_in_plane(xs, ih, iw), xs.c, count, tap);
#pragma unroll
        for (int k = 0; k < kMaxGroup; ++k) {
          if (k >= count) break;
          sum[k] += tap[k];
        }
      }
    }
    const C divisor = static_cast<C>(avg_divisor(g, oh, ow));
#pragma unroll
    for (int k = 0; k < kMaxGroup; ++k) {
      if (k >= count) break;
      sum[k] /= divisor;
    }
    store_group_from_opmath<kPacked>(out + os.at(n, c0, oh, ow), os.c, count, sum);
  }
}

template <typename T, typename Index, typename I, bool kPacked>
__global__ void __launch_bounds__(kBlockSize)
    avg_backward_kernel(const T* __restrict__ grad, T* __restrict__ grad_input, Space<Index> space,
                        Index total, Strides4 gs, Strides4 gis, PoolGeometryT<I> g) {
  using C = opmath_t<T>;
  const int count = kPacked ? kMaxGroup : space.group;
  NABLA_POOL_LOOP(e, total) {
    Index n, group;
    I ih, iw;
    coords_of(space, e, n, group, ih, iw);
    const Index c0 = group * static_cast<Index>(space.group);
    const SpanT<I> hs = avg_covering(g, ih, true), ws = avg_covering(g, iw, false);
    const T* grad_plane = plane_of(grad, gs, n, c0);
    C sum[kMaxGroup];
#pragma unroll
    for (int k = 0; k < kMaxGroup; ++k) sum[k] = C(0);
    for (I oh = hs.begin; oh < hs.end; ++oh) {
      const SpanT<I> rows = avg_span(g, oh, true);
      if (ih < rows.begin || ih >= rows.end) continue;
      for (I ow = ws.begin; ow < ws.end; ++ow) {
        const SpanT<I> cols = avg_span(g, ow, false);
        if (iw < cols.begin || iw >= cols.end) continue;
        C gr[kMaxGroup];
        load_group_as_opmath<kPacked>(grad_plane + offset_in_plane(gs, oh, ow), gs.c, count, gr);
        const C divisor = static_cast<C>(avg_divisor(g, oh, ow));
#pragma unroll
        for (int k = 0; k < kMaxGroup; ++k) {
          if (k >= count) break;
          sum[k] += gr[k] / divisor;
        }
      }
    }
    store_group_from_opmath<kPacked>(grad_input + gis.at(n, c0, ih, iw), gis.c, count, sum);
  }
}

// Global average pooling (is_global_pool): every element of plane (n, c) gets
// grad[n, c] / divisor, added to a zero sum as avg_backward_kernel adds its one window, so the
// values are the same, without the covering windows' and the divisor's integer divisions.
template <typename T, typename Index, typename I, bool kPacked>
__global__ void __launch_bounds__(kBlockSize)
    global_avg_backward_kernel(const T* __restrict__ grad, T* __restrict__ grad_input, Space<Index> space,
                               Index total, Strides4 gs, Strides4 gis, int64_t divisor) {
  using C = opmath_t<T>;
  const int count = kPacked ? kMaxGroup : space.group;
  const C d = static_cast<C>(divisor);
  NABLA_POOL_LOOP(e, total) {
    Index n, group;
    I ih, iw;
    coords_of(space, e, n, group, ih, iw);
    const Index c0 = group * static_cast<Index>(space.group);
    C sum[kMaxGroup];
    load_group_as_opmath<kPacked>(plane_of(grad, gs, n, c0), gs.c, count, sum);
#pragma unroll
    for (int k = 0; k < kMaxGroup; ++k) {
      if (k >= count) break;
      sum[k] = C(0) + sum[k] / d;  // as avg_backward_kernel: a zero sum plus its one term
    }
    store_group_from_opmath<kPacked>(grad_input + gis.at(n, c0, ih, iw), gis.c, count, sum);
  }
}

#undef NABLA_POOL_LOOP

// One output window covering the whole plane: adaptive pooling to 1x1, or a plane-sized kernel
// without padding.
bool is_global_pool(const PoolGeometry& g) {
  if (g.kind == PoolKind::Max || g.out_h != 1 || g.out_w != 1) return false;
  return g.kind == PoolKind::AdaptiveAvg ||
         (g.kernel_h == g.h && g.kernel_w == g.w && g.pad_h == 0 && g.pad_w == 0);
}

// Runs launch.template operator()<T, Index, I, kPacked>(space, total, geometry) for `dtype`, on
// the device of the walked tensor `walk`, with 32-bit positions when `walk` fits and the geometry
// in int when it fits (narrow_geometry). `grouped` lists the tensors the kernel reads and writes
// by channel groups: when it is given and `walk` is NHWC with C % 8 == 0, a thread takes 8
// channels, as packed pieces when every listed tensor is packable. Packed kernels are compiled
// for 32-bit positions and an int geometry only, the case that matters, to bound the kernels
// built; the others move groups channel by channel.
template <typename Launch>
void launch_over(const Tensor& walk, DType dtype, const PoolGeometry& g, const char* op, Launch launch,
                 std::initializer_list<const Tensor*> grouped = {}) {
  if (walk.numel() == 0) return;
  const bool groups = grouped.size() > 0 && !walk.is_contiguous() && walk.size(1) % kMaxGroup == 0;
  const int group = groups ? kMaxGroup : 1;
  bool packed = groups;
  for (const Tensor* t : grouped) packed = packed && packable(*t);
  const int64_t total = walk.numel() / group;
  const bool small = total < (int64_t{1} << 31);
  DeviceScope device(walk.device().index);
  PoolGeometryT<int> g32;
  const bool narrow = narrow_geometry(g, &g32);
  dispatch_device<TypeSet::Floating>(dtype, op, [&]<typename T>() {
    if (narrow && small) {
      const Space<uint32_t> space = space_of<uint32_t>(walk, group);
      if (packed) {
        launch.template operator()<T, uint32_t, int, true>(space, static_cast<uint32_t>(total), g32);
      } else {
        launch.template operator()<T, uint32_t, int, false>(space, static_cast<uint32_t>(total), g32);
      }
    } else if (narrow) {
      launch.template operator()<T, uint64_t, int, false>(space_of<uint64_t>(walk, group),
                                                          static_cast<uint64_t>(total), g32);
    } else if (small) {
      launch.template operator()<T, uint32_t, int64_t, false>(space_of<uint32_t>(walk, group),
                                                              static_cast<uint32_t>(total), g);
    } else {
      launch.template operator()<T, uint64_t, int64_t, false>(space_of<uint64_t>(walk, group),
                                                              static_cast<uint64_t>(total), g);
    }
    NABLA_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace

void max_pool2d(const Tensor& x, const PoolGeometry& g, const Tensor& out, const Tensor& indices) {
  const cudaStream_t stream = stream_for(x);
  dispatch_max_index(indices.dtype(), [&]<typename MaxIndex>() {
    launch_over(out, x.dtype(), g, "max_pool2d",
                [&]<typename T, typename Index, typename I, bool kPacked>(Space<Index> space, Index total,
                                                                          PoolGeometryT<I> geo) {
                  max_forward_kernel<T, MaxIndex, Index, I, kPacked>
                      <<<blocks_for(total), kBlockSize, 0, stream>>>(
                          static_cast<const T*>(x.data_ptr()), static_cast<T*>(out.data_ptr()),
                          static_cast<MaxIndex*>(indices.data_ptr()), space, total, strides_of(x),
                          strides_of(out), strides_of(indices), geo);
                },
                {&x, &out, &indices});
  });
}

void max_pool2d_backward(const Tensor& grad, const Tensor& indices, const PoolGeometry& g,
                         const Tensor& grad_input) {
  const cudaStream_t stream = stream_for(grad);
  dispatch_max_index(indices.dtype(), [&]<typename MaxIndex>() {
    launch_over(
        grad_input, grad.dtype(), g, "max_pool2d_backward",
        [&]<typename T, typename Index, typename I, bool kPacked>(Space<Index> space, Index total,
                                                                  PoolGeometryT<I> geo) {
          max_backward_kernel<T, MaxIndex, Index, I, kPacked><<<blocks_for(total), kBlockSize, 0, stream>>>(
              static_cast<const T*>(grad.data_ptr()), static_cast<const MaxIndex*>(indices.data_ptr()),
              static_cast<T*>(grad_input.data_ptr()), space, total, strides_of(grad), strides_of(indices),
              strides_of(grad_input), geo);
        },
        {&grad, &indices, &grad_input});
  });
}

void max_pool2d_positions(const Tensor& offsets, const PoolGeometry& g, const Tensor& positions) {
  if (positions.numel() == 0) return;
  const cudaStream_t stream = stream_for(positions);
  DeviceScope device(positions.device().index);
  const auto total = static_cast<uint64_t>(positions.numel());
  max_positions_kernel<<<blocks_for(positions.numel()), kBlockSize, 0, stream>>>(
      offsets.data_ptr<uint8_t>(), positions.data_ptr<int64_t>(), space_of<uint64_t>(positions, 1), total,
      strides_of(offsets), strides_of(positions), g);
  NABLA_CUDA_CHECK_LAUNCH();
}

void avg_pool2d(const Tensor& x, const PoolGeometry& g, const Tensor& out) {
  const cudaStream_t stream = stream_for(x);
  auto launch = [&]<typename T, typename Index, typename I, bool kPacked>(Space<Index> space, Index total,
                                                                          PoolGeometryT<I> geo) {
    avg_forward_kernel<T, Index, I, kPacked><<<blocks_for(total), kBlockSize, 0, stream>>>(
        static_cast<const T*>(x.data_ptr()), static_cast<T*>(out.data_ptr()), space, total, strides_of(x),
        strides_of(out), geo);
  };
  if (is_global_pool(g)) {
    // A thread per output, without channel groups (ResNet-50's 51 MB at batch 256 is already a
    // small share of its step): channel groups would leave N * C / 8 threads (65K there) each
    // reading a whole plane in a row, which may be too few to keep enough loads in flight (not
    // measured).
    launch_over(out, x.dtype(), g, "avg_pool2d", launch);
  } else {
    launch_over(out, x.dtype(), g, "avg_pool2d", launch, {&x, &out});
  }
}

void avg_pool2d_backward(const Tensor& grad, const PoolGeometry& g, const Tensor& grad_input) {
  const cudaStream_t stream = stream_for(grad);
  if (is_global_pool(g)) {
    const int64_t divisor = avg_divisor(g, int64_t{0}, int64_t{0});
    launch_over(grad_input, grad.dtype(), g, "avg_pool2d_backward",
                [&]<typename T, typename Index, typename I, bool kPacked>(Space<Index> space, Index total,
                                                                          PoolGeometryT<I>) {
                  global_avg_backward_kernel<T, Index, I, kPacked>
                      <<<blocks_for(total), kBlockSize, 0, stream>>>(
                          static_cast<const T*>(grad.data_ptr()), static_cast<T*>(grad_input.data_ptr()),
                          space, total, strides_of(grad), strides_of(grad_input), divisor);
                },
                {&grad, &grad_input});
    return;
  }
  launch_over(grad_input, grad.dtype(), g, "avg_pool2d_backward",
              [&]<typename T, typename Index, typename I, bool kPacked>(Space<Index> space, Index total,
                                                                        PoolGeometryT<I> geo) {
                avg_backward_kernel<T, Index, I, kPacked><<<blocks_for(total), kBlockSize, 0, stream>>>(
                    static_cast<const T*>(grad.data_ptr()), static_cast<T*>(grad_input.data_ptr()), space,
                    total, strides_of(grad), strides_of(grad_input), geo);
              },
              {&grad, &grad_input});
}

}  // namespace nabla::ops::cuda
