// Internal (ops/cuda). The reduction kernels' bodies, generic over an Op (the CUDA twin of the
// CPU's Reducer) and a Source of the reduced elements:
//
//   struct Op {
//     using In = ...;   // what the source gives
//     using Acc = ...;  // accumulator: arithmetic, or a trivially copyable struct of 4-byte multiples
//     Acc init() const;                          // the identity of combine()
//     void update(Acc&, In value, int64_t r) const;  // r: position along the reduced elements
//     Acc combine(Acc, Acc) const;               // associative; ties are settled by r, not order
//     void write(int64_t k, Acc) const;          // stores output k of the dense (O, I) result
//   };
//   struct Source {
//     using Value = Op::In;
//     static constexpr int kVector;               // elements per 16-byte load of the input
//     Value operator()(int64_t e) const;          // element e of the dense input
//     int64_t to_boundary(int64_t e) const;       // elements from e to the next 16-byte boundary
//     void load_vector(int64_t e, Value (&v)[kVector]) const;  // e at a boundary
//   };
//
// The eager reductions read memory (PointerSource, reduce/launch.cuh); the step compiler's
// generated reductions compute each element from a fused chain of pointwise ops instead, and
// count boundaries as the intermediate's fresh buffer would have them, so both fold the same
// elements in the same order and give the same bits (ops/fusion/codegen_reduction.cpp).
//
// Two kernels cover the (A, O, B, I) block of Note [Reduction layout]:
//  - rows (I == 1): lanes along x fold one output's elements, which are contiguous along B;
//    a warp (or a sub-warp for short rows) per output, or a 256/512-thread block per output for
//    long rows. Partial results meet through warp shuffles.
//  - columns (I > 1): lanes along x take consecutive outputs, so loads are coalesced along I;
//    lanes along y split the reduced elements and meet in shared memory.
// When there are too few outputs to fill the GPU (a full sum; per-channel statistics), grid.y
// splits the reduced elements into chunks whose partial accumulators reduce_partials combines.
// The launch shapes are chosen on the host by plan_launch (reduce/geometry.cpp). Plain CUDA
// without the standard library, so that NVRTC compiles it too (the build embeds it).
#pragma once

#include <cstdint>

#include "nabla/ops/cuda/reduce/geometry.h"

namespace nabla::ops::cuda::reduction {

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

__device__ __forceinline__ int64_t min64(int64_t a, int64_t b) {
  return a < b ? a : b;
}

// Shuffles of arithmetic accumulators, and of structs as whole ints.
__device__ __forceinline__ float shfl_down(float v, unsigned offset) {
  return __shfl_down_sync(0xffffffffu, v, offset);
}
__device__ __forceinline__ double shfl_down(double v, unsigned offset) {
  return __shfl_down_sync(0xffffffffu, v, offset);
}
__device__ __forceinline__ int shfl_down(int v, unsigned offset) {
  return __shfl_down_sync(0xffffffffu, v, offset);
}
__device__ __forceinline__ long shfl_down(long v, unsigned offset) {
  return __shfl_down_sync(0xffffffffu, v, offset);
}
__device__ __forceinline__ long long shfl_down(long long v, unsigned offset) {
  return __shfl_down_sync(0xffffffffu, v, offset);
}
template <typename Acc>
__device__ __forceinline__ Acc shfl_down(Acc v, unsigned offset) {
  static_assert(sizeof(Acc) % sizeof(int) == 0, "accumulator structs shuffle as whole ints");
  int* words = reinterpret_cast<int*>(&v);
#pragma unroll
  for (unsigned w = 0; w < sizeof(Acc) / sizeof(int); ++w)
    words[w] = __shfl_down_sync(0xffffffffu, words[w], offset);
  return v;
}

// Lane `src` of each segment of `width` lanes (a power of two <= 32) to every lane of it.
__device__ __forceinline__ float shfl_idx(float v, int src, int width) {
  return __shfl_sync(0xffffffffu, v, src, width);
}
__device__ __forceinline__ double shfl_idx(double v, int src, int width) {
  return __shfl_sync(0xffffffffu, v, src, width);
}
template <typename Acc>
__device__ __forceinline__ Acc shfl_idx(Acc v, int src, int width) {
  static_assert(sizeof(Acc) % sizeof(int) == 0, "accumulator structs shuffle as whole ints");
  int* words = reinterpret_cast<int*>(&v);
#pragma unroll
  for (unsigned w = 0; w < sizeof(Acc) / sizeof(int); ++w)
    words[w] = __shfl_sync(0xffffffffu, words[w], src, width);
  return v;
}

// Folds each group of `width` lanes (a power of two <= 32, groups aligned in the warp) into the
// group's first lane. Every lane of the warp must call it.
template <typename Op>
__device__ __forceinline__ typename Op::Acc warp_reduce(const Op& op, typename Op::Acc acc, unsigned width) {
  for (unsigned offset = width / 2; offset > 0; offset /= 2) acc = op.combine(acc, shfl_down(acc, offset));
  return acc;
}

// Folds the elements r, r + step, ... < r1 of the output whose first element is `base`. Four
// accumulators keep four loads in flight. With A == 1, element r sits at r * I: no walker.
template <typename Op, typename Source>
__device__ __forceinline__ typename Op::Acc fold(const Op& op, const Source& src, int64_t base,
                                                 const Geometry& g, int64_t r, int64_t r1, int64_t step) {
  using Acc = typename Op::Acc;
  Acc acc[4] = {op.init(), op.init(), op.init(), op.init()};
  if (g.a == 1) {
    const int64_t stride = g.i;
    for (; r + 3 * step < r1; r += 4 * step) {
      typename Op::In v[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) v[j] = src(base + (r + j * step) * stride);
#pragma unroll
      for (int j = 0; j < 4; ++j) op.update(acc[j], v[j], r + j * step);
    }
    for (; r < r1; r += step) op.update(acc[0], src(base + r * stride), r);
  } else if (r < r1) {
    Walker w(g, r, step);
    for (; r + 3 * step < r1; r += 4 * step) {
      typename Op::In v[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        v[j] = src(base + w.offset());
        w.advance();
      }
#pragma unroll
      for (int j = 0; j < 4; ++j) op.update(acc[j], v[j], r + j * step);
    }
    for (; r < r1; r += step) {
      op.update(acc[0], src(base + w.offset()), r);
      w.advance();
    }
  }
  return op.combine(op.combine(acc[0], acc[1]), op.combine(acc[2], acc[3]));
}

// Folds the contiguous elements row + r0 .. row + r1 with `lanes` lanes, this one being `lane`:
// 16-byte loads, two in flight per lane, with scalar head and tail where the range is not
// 16-byte aligned. Each accumulator sees its elements in increasing order, so "first on ties"
// holds within it.
template <typename Op, typename Source>
__device__ __forceinline__ typename Op::Acc fold_contiguous(const Op& op, const Source& src, int64_t row,
                                                            int64_t r0, int64_t r1, unsigned lane,
                                                            unsigned lanes) {
  using In = typename Op::In;
  using Acc = typename Op::Acc;
  constexpr int V = Source::kVector;
  Acc acc[4] = {op.init(), op.init(), op.init(), op.init()};
  const int64_t p = row + r0;
  const int64_t n = r1 - r0;
  const int64_t head = min64(n, src.to_boundary(p));  // elements before the first 16-byte boundary
  for (int64_t j = lane; j < head; j += lanes) op.update(acc[0], src(p + j), r0 + j);
  const int64_t vp = p + head;
  const int64_t vectors = (n - head) / V;
  int64_t v = lane;
  for (; v + lanes < vectors; v += 2 * int64_t{lanes}) {
    In a[V], b[V];
    src.load_vector(vp + v * V, a);
    src.load_vector(vp + (v + lanes) * V, b);
    const int64_t ra = r0 + head + v * V, rb = ra + int64_t{lanes} * V;
#pragma unroll
    for (int e = 0; e < V; ++e) op.update(acc[e % 2], a[e], ra + e);
#pragma unroll
    for (int e = 0; e < V; ++e) op.update(acc[2 + e % 2], b[e], rb + e);
  }
  if (v < vectors) {
    In a[V];
    src.load_vector(vp + v * V, a);
    const int64_t ra = r0 + head + v * V;
#pragma unroll
    for (int e = 0; e < V; ++e) op.update(acc[e % 2], a[e], ra + e);
  }
  for (int64_t j = head + vectors * V + lane; j < n; j += lanes) op.update(acc[0], src(p + j), r0 + j);
  return op.combine(op.combine(acc[0], acc[1]), op.combine(acc[2], acc[3]));
}

// The result of one (output, split): the output itself, or a partial for reduce_partials.
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
// per block. gridDim (outputs / by, splits). At most 512 threads.
template <typename Op, typename Source>
__device__ __forceinline__ void reduce_rows(const Op& op, const Source& src, const Geometry& g,
                                            typename Op::Acc* partial) {
  using Acc = typename Op::Acc;
  const int64_t k = int64_t{blockIdx.x} * blockDim.y + threadIdx.y;
  const bool active = k < g.outputs;
  const int64_t r0 = int64_t{blockIdx.y} * g.chunk, r1 = min64(g.reduce, r0 + g.chunk);
  Acc acc = op.init();
  // Output k = (o) starts at o * B (I == 1); with A == 1 its elements are contiguous.
  if (active) {
    acc = g.a == 1 ? fold_contiguous(op, src, k * g.b, r0, r1, threadIdx.x, blockDim.x)
                   : fold(op, src, k * g.b, g, r0 + threadIdx.x, r1, blockDim.x);
  }
  acc = warp_reduce(op, acc, blockDim.x < 32 ? blockDim.x : 32u);
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

// Note [One-pass rows] (ops/fusion/plan.cpp): reduce_rows of contiguous rows (A == 1) in one
// split, after which every lane of row k holds the row's result and calls then(k, acc, lane,
// lanes) to walk the row again. The fold and the combines are reduce_rows', so the result's bits
// are too. Launched as reduce_rows is, with gridDim.y == 1.
template <typename Op, typename Source, typename Then>
__device__ __forceinline__ void reduce_rows_then(const Op& op, const Source& src, const Geometry& g,
                                                 const Then& then) {
  using Acc = typename Op::Acc;
  const int64_t k = int64_t{blockIdx.x} * blockDim.y + threadIdx.y;
  const bool active = k < g.outputs;
  Acc acc = op.init();
  if (active) acc = fold_contiguous(op, src, k * g.b, 0, g.reduce, threadIdx.x, blockDim.x);
  acc = warp_reduce(op, acc, blockDim.x < 32 ? blockDim.x : 32u);
  if (blockDim.x > 32) {
    __shared__ alignas(16) unsigned char raw[32 * sizeof(Acc)];
    __shared__ alignas(16) unsigned char whole[sizeof(Acc)];
    Acc* per_warp = reinterpret_cast<Acc*>(raw);
    const unsigned warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (lane == 0) per_warp[warp] = acc;
    __syncthreads();
    if (warp == 0) acc = warp_reduce(op, lane < blockDim.x / 32 ? per_warp[lane] : op.init(), 32);
    if (threadIdx.x == 0) *reinterpret_cast<Acc*>(whole) = acc;
    __syncthreads();
    acc = *reinterpret_cast<const Acc*>(whole);
  } else {
    acc = shfl_idx(acc, 0, static_cast<int>(blockDim.x));
  }
  if (!active) return;
  if (threadIdx.x == 0) op.write(k, acc);
  then(k, acc, threadIdx.x, blockDim.x);
}

// blockDim (bx, by): bx consecutive inner positions (coalesced loads), by lanes (a power of two)
// splitting the reduced elements. gridDim (O * ceil(I / bx), splits). At most 256 threads.
template <typename Op, typename Source>
__device__ __forceinline__ void reduce_columns(const Op& op, const Source& src, const Geometry& g,
                                               typename Op::Acc* partial) {
  using Acc = typename Op::Acc;
  __shared__ alignas(16) unsigned char raw[256 * sizeof(Acc)];
  Acc* lanes = reinterpret_cast<Acc*>(raw);
  const int64_t tiles = (g.i + blockDim.x - 1) / blockDim.x;
  const int64_t o = blockIdx.x / tiles, i = (blockIdx.x % tiles) * blockDim.x + threadIdx.x;
  const bool active = i < g.i;
  const int64_t r0 = int64_t{blockIdx.y} * g.chunk, r1 = min64(g.reduce, r0 + g.chunk);
  Acc acc = op.init();
  // Output (o, i) starts at o * B * I + i.
  if (active) acc = fold(op, src, o * g.b * g.i + i, g, r0 + threadIdx.y, r1, blockDim.y);
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
__device__ __forceinline__ void reduce_partials(const Op& op, const typename Op::Acc* __restrict__ partial,
                                                int64_t outputs, int64_t splits) {
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

}  // namespace nabla::ops::cuda::reduction
