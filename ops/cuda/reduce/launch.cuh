// Internal (ops/cuda only). The eager reductions' launcher, generic over an Op (see
// reduce/fold.cuh for the Op and the kernels' bodies), reading the input from memory through a
// PointerSource. The input is the (A, O, B, I) block of Note [Reduction layout]
// (ops/detail/reduce_layout.h); plan_launch (reduce/geometry.cpp) picks the kernel, its block
// and its splits, the same way for the step compiler's generated reductions. A block with two
// reduced runs (A, O, B, 1) and B of 128 or more (NCHW per-channel statistics) reduces each
// contiguous B segment as a row first (SegmentWriter). Nothing synchronizes the host; the
// partials live in a temporary from the caching allocator.
#pragma once

#include <algorithm>

#include "nabla/ops/cuda/common.cuh"
#include "nabla/ops/cuda/reduce/fold.cuh"
#include "nabla/ops/cuda/reduce/layout.h"

namespace nabla::ops::cuda::reduction {

// Elements per 16-byte load.
template <typename T>
inline constexpr int kVector = 16 / sizeof(T);

// The input as it lies in memory.
template <typename T>
struct PointerSource {
  using Value = T;
  static constexpr int kVector = 16 / sizeof(T);
  struct alignas(16) Vec {
    T v[kVector];
  };
  const T* __restrict__ x;

  __device__ T operator()(int64_t e) const { return x[e]; }
  __device__ int64_t to_boundary(int64_t e) const {
    return (kVector - reinterpret_cast<uintptr_t>(x + e) / sizeof(T) % kVector) % kVector;
  }
  __device__ void load_vector(int64_t e, T (&v)[kVector]) const {
    const Vec t = *reinterpret_cast<const Vec*>(x + e);
#pragma unroll
    for (int j = 0; j < kVector; ++j) v[j] = t.v[j];
  }
};

template <typename Op>
__global__ void __launch_bounds__(512)
    reduce_rows_kernel(Op op, const typename Op::In* __restrict__ x, Geometry g, typename Op::Acc* partial) {
  reduce_rows(op, PointerSource<typename Op::In>{x}, g, partial);
}

template <typename Op>
__global__ void __launch_bounds__(256) reduce_columns_kernel(Op op, const typename Op::In* __restrict__ x,
                                                             Geometry g, typename Op::Acc* partial) {
  reduce_columns(op, PointerSource<typename Op::In>{x}, g, partial);
}

template <typename Op>
__global__ void __launch_bounds__(256)
    reduce_partials_kernel(Op op, const typename Op::Acc* __restrict__ partial, int64_t outputs,
                           int64_t splits) {
  reduce_partials(op, partial, outputs, splits);
}

// Stage one of a reduction whose reduced elements form two runs around a kept one (A, O, B, 1),
// like per-channel statistics of an NCHW tensor: each contiguous (ra, o) segment of B elements
// is reduced as a row of its own (coalesced 16-byte loads, no walker), and its accumulator is
// stored at partial[o * A + ra] for reduce_partials_kernel to fold over ra. Positions are
// within the segment, which only matters for indices, and those reduce a single dim (A == 1).
template <typename Op>
struct SegmentWriter {
  using In = typename Op::In;
  using Acc = typename Op::Acc;
  Op op;
  Acc* partial;
  int64_t o, a;

  __device__ Acc init() const { return op.init(); }
  __device__ void update(Acc& acc, In v, int64_t r) const { op.update(acc, v, r); }
  __device__ Acc combine(const Acc& x, const Acc& y) const { return op.combine(x, y); }
  __device__ void write(int64_t k, const Acc& acc) const { partial[(k % o) * a + k / o] = acc; }
};

template <typename Op>
inline constexpr bool kIsSegmentWriter = false;
template <typename Op>
inline constexpr bool kIsSegmentWriter<SegmentWriter<Op>> = true;

// Picks the kernel and its launch shape (plan_launch) and runs it on the input's current stream.
template <typename Op>
void launch(const Op& op, const ReduceLayout& layout) {
  using Acc = typename Op::Acc;
  if (layout.outputs() == 0) return;
  NABLA_ASSERT(layout.reduce_size() > 0, "empty reductions are filled, not launched");
  const Device device = layout.input.device();
  const cudaStream_t stream = stream_for(layout.input);
  if constexpr (!kIsSegmentWriter<Op>) {
    if (layout.a > 1 && layout.i == 1 && layout.b >= 128) {
      // Segments long enough to amortize a partial each: reduce them as rows, then fold over A.
      Tensor segment_buffer = Tensor::empty({layout.a * layout.o * static_cast<int64_t>(sizeof(Acc))},
                                            {.dtype = kUInt8, .device = device});
      auto* segment_partial = static_cast<Acc*>(segment_buffer.data_ptr());
      ReduceLayout segments = layout;
      segments.o = layout.a * layout.o;
      segments.a = 1;
      launch(SegmentWriter<Op>{op, segment_partial, layout.o, layout.a}, segments);
      reduce_partials_kernel<<<static_cast<unsigned>(ceil_div(layout.o, 8)), dim3(32, 8), 0, stream>>>(
          op, segment_partial, layout.o, layout.a);
      NABLA_CUDA_CHECK_LAUNCH();
      return;
    }
  }
  const LaunchShape shape =
      plan_launch(layout.a, layout.o, layout.b, layout.i, sm_count(device.index), kVector<typename Op::In>);
  const Geometry& g = shape.g;
  const dim3 grid(shape.grid_x, shape.grid_y), block(shape.block_x, shape.block_y);
  Tensor partial_buffer;  // freed after the launches; the caching allocator orders reuse on the stream
  Acc* partial = nullptr;
  if (g.splits > 1) {
    partial_buffer = Tensor::empty({g.outputs * g.splits * static_cast<int64_t>(sizeof(Acc))},
                                   {.dtype = kUInt8, .device = device});
    partial = static_cast<Acc*>(partial_buffer.data_ptr());
  }
  const auto* x = static_cast<const typename Op::In*>(layout.input.data_ptr());
  if (shape.rows) {
    reduce_rows_kernel<<<grid, block, 0, stream>>>(op, x, g, partial);
  } else {
    reduce_columns_kernel<<<grid, block, 0, stream>>>(op, x, g, partial);
  }
  NABLA_CUDA_CHECK_LAUNCH();
  if (partial) {
    reduce_partials_kernel<<<static_cast<unsigned>(ceil_div(g.outputs, 8)), dim3(32, 8), 0, stream>>>(
        op, partial, g.outputs, g.splits);
    NABLA_CUDA_CHECK_LAUNCH();
  }
}

}  // namespace nabla::ops::cuda::reduction
