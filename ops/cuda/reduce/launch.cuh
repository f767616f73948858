// Internal (ops/cuda only). The reduction kernels every reduce_*.cu file shares, generic over an
// Op (the CUDA twin of the CPU's Reducer):
//
//   struct Op {
//     using In = ...;   // device element type
//     using Acc = ...;  // accumulator: arithmetic, or a trivially copyable struct of 4-byte multiples
//     Acc init() const;                          // the identity of combine()
//     void update(Acc&, In value, int64_t r) const;  // r: position along the reduced elements
//     Acc combine(Acc, Acc) const;               // associative; ties are settled by r, not order
//     void write(int64_t k, Acc) const;          // stores output k of the dense (O, I) result
//   };
//
// The input is the (A, O, B, I) block of Note [Reduction layout] (ops/detail/reduce_layout.h). Two kernels
// cover it:
//  - rows (I == 1): lanes along x fold one output's elements, which are contiguous along B;
//    a warp (or a sub-warp for short rows) per output, or a 256/512-thread block per output for
//    long rows. Partial results meet through warp shuffles.
//  - columns (I > 1): lanes along x take consecutive outputs, so loads are coalesced along I;
//    lanes along y split the reduced elements and meet in shared memory.
// When there are too few outputs to fill the GPU (a full sum; per-channel statistics), grid.y
// splits the reduced elements into chunks whose partial accumulators a second kernel combines.
// A block with two reduced runs (A, O, B, 1) and B of 128 or more (NCHW per-channel
// statistics) reduces each contiguous B segment as a row first (SegmentWriter).
// Nothing synchronizes the host; the partials live in a temporary from the caching allocator.
#pragma once

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "nabla/ops/cuda/common.cuh"
#include "nabla/ops/cuda/reduce/layout.h"

namespace nabla::ops::cuda::reduction {

struct Geometry {
  int64_t a, o, b, i;
  int64_t reduce;   // a * b elements per output
  int64_t outputs;  // o * i
  int64_t chunk;    // reduced elements per split
  int64_t splits;   // gridDim.y
};

// Walks the reduced elements r, r + step, r + 2 step, ... of one output. Element r sits at
// (r / B) * (O * B * I) + (r % B) * I from the output's first element; stepping avoids a
// division per element.
struct Walker {
  int64_t ra, rb, b, stride_a, stride_b, step_a, step_b;

  __device__ Walker(const Geometry& g, int64_t r, int64_t step)
      : ra(r / g.b),
        rb(r % g.b),
        b(g.b),
        stride_a(g.o * g.b * g.i),
        stride_b(g.i),
        step_a(step / g.b),
        step_b(step % g.b) {}
  __device__ int64_t offset() const { return ra * stride_a + rb * stride_b; }
  __device__ void advance() {
    rb += step_b;
    ra += step_a;
    if (rb >= b) {
      rb -= b;
      ++ra;
    }
  }
};

template <typename Acc>
__device__ __forceinline__ Acc shfl_down(Acc v, unsigned offset) {
  if constexpr (std::is_arithmetic_v<Acc>) {
    return __shfl_down_sync(0xffffffffu, v, offset);
  } else {
    static_assert(sizeof(Acc) % sizeof(int) == 0, "accumulator structs shuffle as whole ints");
    int words[sizeof(Acc) / sizeof(int)];
    memcpy(words, &v, sizeof(Acc));
#pragma unroll
    for (size_t w = 0; w < sizeof(Acc) / sizeof(int); ++w)
      words[w] = __shfl_down_sync(0xffffffffu, words[w], offset);
    memcpy(&v, words, sizeof(Acc));
    return v;
  }
}

// Folds each group of `width` lanes (a power of two <= 32, groups aligned in the warp) into the
// group's first lane. Every lane of the warp must call it.
template <typename Op>
__device__ __forceinline__ typename Op::Acc warp_reduce(const Op& op, typename Op::Acc acc, unsigned width) {
  for (unsigned offset = width / 2; offset > 0; offset /= 2) acc = op.combine(acc, shfl_down(acc, offset));
  return acc;
}

// Folds the elements r, r + step, ... < r1 of the output whose first element is x[0]. Four
// accumulators keep four loads in flight. With A == 1, element r sits at r * I: no walker.
template <typename Op>
__device__ __forceinline__ typename Op::Acc fold(const Op& op, const typename Op::In* __restrict__ x,
                                                 const Geometry& g, int64_t r, int64_t r1, int64_t step) {
  using Acc = typename Op::Acc;
  Acc acc[4] = {op.init(), op.init(), op.init(), op.init()};
  if (g.a == 1) {
    const int64_t stride = g.i;
    for (; r + 3 * step < r1; r += 4 * step) {
      typename Op::In v[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) v[j] = x[(r + j * step) * stride];
#pragma unroll
      for (int j = 0; j < 4; ++j) op.update(acc[j], v[j], r + j * step);
    }
    for (; r < r1; r += step) op.update(acc[0], x[r * stride], r);
  } else if (r < r1) {
    Walker w(g, r, step);
    for (; r + 3 * step < r1; r += 4 * step) {
      typename Op::In v[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        v[j] = x[w.offset()];
        w.advance();
      }
#pragma unroll
      for (int j = 0; j < 4; ++j) op.update(acc[j], v[j], r + j * step);
    }
    for (; r < r1; r += step) {
      op.update(acc[0], x[w.offset()], r);
      w.advance();
    }
  }
  return op.combine(op.combine(acc[0], acc[1]), op.combine(acc[2], acc[3]));
}

// Elements per 16-byte load.
template <typename T>
inline constexpr int kVector = 16 / sizeof(T);

// Folds row[r0:r1) (contiguous) with `lanes` lanes, this one being `lane`: 16-byte loads, two in
// flight per lane, with scalar head and tail where the range is not 16-byte aligned. Each
// accumulator sees its elements in increasing order, so "first on ties" holds within it.
template <typename Op>
__device__ __forceinline__ typename Op::Acc fold_contiguous(const Op& op,
                                                            const typename Op::In* __restrict__ row,
                                                            int64_t r0, int64_t r1, unsigned lane,
                                                            unsigned lanes) {
  using In = typename Op::In;
  using Acc = typename Op::Acc;
  constexpr int V = kVector<In>;
  struct alignas(16) Vec {
    In v[V];
  };
  Acc acc[4] = {op.init(), op.init(), op.init(), op.init()};
  const In* p = row + r0;
  const int64_t n = r1 - r0;
  // Elements before the first 16-byte boundary.
  const int64_t head =
      min(n, static_cast<int64_t>((V - reinterpret_cast<uintptr_t>(p) / sizeof(In) % V) % V));
  for (int64_t j = lane; j < head; j += lanes) op.update(acc[0], p[j], r0 + j);
  const Vec* vp = reinterpret_cast<const Vec*>(p + head);
  const int64_t vectors = (n - head) / V;
  int64_t v = lane;
  for (; v + lanes < vectors; v += 2 * int64_t{lanes}) {
    const Vec a = vp[v], b = vp[v + lanes];
    const int64_t ra = r0 + head + v * V, rb = ra + int64_t{lanes} * V;
#pragma unroll
    for (int e = 0; e < V; ++e) op.update(acc[e % 2], a.v[e], ra + e);
#pragma unroll
    for (int e = 0; e < V; ++e) op.update(acc[2 + e % 2], b.v[e], rb + e);
  }
  if (v < vectors) {
    const Vec a = vp[v];
    const int64_t ra = r0 + head + v * V;
#pragma unroll
    for (int e = 0; e < V; ++e) op.update(acc[e % 2], a.v[e], ra + e);
  }
  for (int64_t j = head + vectors * V + lane; j < n; j += lanes) op.update(acc[0], p[j], r0 + j);
  return op.combine(op.combine(acc[0], acc[1]), op.combine(acc[2], acc[3]));
}

// The result of one (output, split): the output itself, or a partial for reduce_partials_kernel.
template <typename Op>
__device__ __forceinline__ void finish(const Op& op, typename Op::Acc* partial, const Geometry& g, int64_t k,
                                       const typename Op::Acc& acc) {
  if (partial) {
    partial[k * g.splits + blockIdx.y] = acc;
  } else {
    op.write(k, acc);
  }
}

// blockDim (bx, by): bx lanes (a power of two; when > 32, by == 1) fold one output; by outputs
// per block. gridDim (outputs / by, splits).
template <typename Op>
__global__ void __launch_bounds__(512)
    reduce_rows_kernel(Op op, const typename Op::In* __restrict__ x, Geometry g, typename Op::Acc* partial) {
  using Acc = typename Op::Acc;
  const int64_t k = int64_t{blockIdx.x} * blockDim.y + threadIdx.y;
  const bool active = k < g.outputs;
  const int64_t r0 = int64_t{blockIdx.y} * g.chunk, r1 = min(g.reduce, r0 + g.chunk);
  Acc acc = op.init();
  // Output k = (o) starts at o * B (I == 1); with A == 1 its elements are contiguous.
  if (active) {
    acc = g.a == 1 ? fold_contiguous(op, x + k * g.b, r0, r1, threadIdx.x, blockDim.x)
                   : fold(op, x + k * g.b, g, r0 + threadIdx.x, r1, blockDim.x);
  }
  acc = warp_reduce(op, acc, min(blockDim.x, 32u));
  if (blockDim.x > 32) {
    __shared__ alignas(16) unsigned char raw[32 * sizeof(Acc)];
    Acc* per_warp = reinterpret_cast<Acc*>(raw);
    const unsigned warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (lane == 0) per_warp[warp] = acc;
    __syncthreads();
    if (warp == 0) acc = warp_reduce(op, lane < blockDim.x / 32 ? per_warp[lane] : op.init(), 32);
  }
  if (threadIdx.x == 0 && active) finish(op, partial, g, k, acc);
}

// blockDim (bx, by): bx consecutive inner positions (coalesced loads), by lanes (a power of two)
// splitting the reduced elements. gridDim (O * ceil(I / bx), splits).
template <typename Op>
__global__ void __launch_bounds__(256) reduce_columns_kernel(Op op, const typename Op::In* __restrict__ x,
                                                             Geometry g, typename Op::Acc* partial) {
  using Acc = typename Op::Acc;
  __shared__ alignas(16) unsigned char raw[256 * sizeof(Acc)];
  Acc* lanes = reinterpret_cast<Acc*>(raw);
  const int64_t tiles = (g.i + blockDim.x - 1) / blockDim.x;
  const int64_t o = blockIdx.x / tiles, i = (blockIdx.x % tiles) * blockDim.x + threadIdx.x;
  const bool active = i < g.i;
  const int64_t r0 = int64_t{blockIdx.y} * g.chunk, r1 = min(g.reduce, r0 + g.chunk);
  Acc acc = op.init();
  // Output (o, i) starts at o * B * I + i.
  if (active) acc = fold(op, x + o * g.b * g.i + i, g, r0 + threadIdx.y, r1, blockDim.y);
  const unsigned slot = threadIdx.y * blockDim.x + threadIdx.x;
  lanes[slot] = acc;
  __syncthreads();
  for (unsigned half = blockDim.y / 2; half > 0; half /= 2) {
    if (threadIdx.y < half) lanes[slot] = op.combine(lanes[slot], lanes[slot + half * blockDim.x]);
    __syncthreads();
  }
  if (threadIdx.y == 0 && active) finish(op, partial, g, o * g.i + i, lanes[threadIdx.x]);
}

// blockDim (32, 8): a warp per output folds its splits' partials (stored [k * splits + s]).
template <typename Op>
__global__ void __launch_bounds__(256)
    reduce_partials_kernel(Op op, const typename Op::Acc* __restrict__ partial, int64_t outputs,
                           int64_t splits) {
  using Acc = typename Op::Acc;
  const int64_t k = int64_t{blockIdx.x} * blockDim.y + threadIdx.y;
  const bool active = k < outputs;
  Acc acc = op.init();
  if (active) {
    for (int64_t s = threadIdx.x; s < splits; s += 32) acc = op.combine(acc, partial[k * splits + s]);
  }
  acc = warp_reduce(op, acc, 32);
  if (threadIdx.x == 0 && active) op.write(k, acc);
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

inline int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

inline unsigned pow2_at_least(int64_t n, unsigned cap) {
  unsigned p = 1;
  while (p < cap && p < n) p *= 2;
  return p;
}

// Picks the kernel and its launch shape (see the top of this file) and runs it on the input's
// current stream.
template <typename Op>
void launch(const Op& op, const ReduceLayout& layout) {
  using Acc = typename Op::Acc;
  Geometry g{.a = layout.a,
             .o = layout.o,
             .b = layout.b,
             .i = layout.i,
             .reduce = layout.reduce_size(),
             .outputs = layout.outputs(),
             .chunk = 0,
             .splits = 1};
  if (g.outputs == 0) return;
  NABLA_ASSERT(g.reduce > 0, "empty reductions are filled, not launched");
  const Device device = layout.input.device();
  const cudaStream_t stream = stream_for(layout.input);
  const int64_t sms = sm_count(device.index);
  if constexpr (!kIsSegmentWriter<Op>) {
    if (g.a > 1 && g.i == 1 && g.b >= 128) {
      // Segments long enough to amortize a partial each: reduce them as rows, then fold over A.
      Tensor segment_buffer =
          Tensor::empty({g.a * g.o * static_cast<int64_t>(sizeof(Acc))}, {.dtype = kUInt8, .device = device});
      auto* segment_partial = static_cast<Acc*>(segment_buffer.data_ptr());
      ReduceLayout segments = layout;
      segments.o = g.a * g.o;
      segments.a = 1;
      launch(SegmentWriter<Op>{op, segment_partial, g.o, g.a}, segments);
      reduce_partials_kernel<<<static_cast<unsigned>(ceil_div(g.o, 8)), dim3(32, 8), 0, stream>>>(
          op, segment_partial, g.o, g.a);
      NABLA_CUDA_CHECK_LAUNCH();
      return;
    }
  }
  const bool rows = g.i == 1;
  dim3 block;
  int64_t blocks = 0;
  if (rows) {
    if (g.reduce <= 1024 || g.outputs >= sms * 32) {
      // A warp, or a sub-warp for short rows (counted in 16-byte loads when contiguous).
      block.x = pow2_at_least(g.a == 1 ? ceil_div(g.reduce, kVector<typename Op::In>) : g.reduce, 32);
      block.y = 256 / block.x;
    } else {
      block.x = g.reduce >= 4096 ? 512 : 256;  // a block per long row
      block.y = 1;
      const int64_t want = ceil_div(sms * 4, g.outputs);  // about 4 blocks per SM
      g.splits = std::clamp<int64_t>(std::min(want, ceil_div(g.reduce, block.x * 16)), 1, 65535);
    }
    blocks = ceil_div(g.outputs, block.y);
  } else {
    block.x = pow2_at_least(g.i, 32);
    block.y = std::max(pow2_at_least(g.reduce, 256 / block.x), 32 / block.x);
    blocks = g.o * ceil_div(g.i, block.x);
    const int64_t target = sms * 2048 / (block.x * block.y);  // enough blocks to fill every SM
    if (blocks < target) {
      const int64_t want = ceil_div(target, blocks);
      g.splits = std::clamp<int64_t>(std::min(want, ceil_div(g.reduce, block.y * 16)), 1, 65535);
    }
  }
  g.chunk = ceil_div(g.reduce, g.splits);
  g.splits = ceil_div(g.reduce, g.chunk);
  NABLA_ASSERT(blocks < (int64_t{1} << 31), "reduction grid of {} blocks", blocks);
  const dim3 grid(static_cast<unsigned>(blocks), static_cast<unsigned>(g.splits));

  Tensor partial_buffer;  // freed after the launches; the caching allocator orders reuse on the stream
  Acc* partial = nullptr;
  if (g.splits > 1) {
    partial_buffer = Tensor::empty({g.outputs * g.splits * static_cast<int64_t>(sizeof(Acc))},
                                   {.dtype = kUInt8, .device = device});
    partial = static_cast<Acc*>(partial_buffer.data_ptr());
  }
  const auto* x = static_cast<const typename Op::In*>(layout.input.data_ptr());
  if (rows) {
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
