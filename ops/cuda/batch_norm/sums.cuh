// Internal (ops/cuda/batch_norm/batch_norm.cu only). Per-channel sums over x's layout, in two steps: many
// blocks per channel write partial sums (so a 64-channel layer still fills the GPU), then
// warp_total_of adds a channel's partials in a fixed order, so the result is deterministic.
// Contiguous x is read plane by plane, channels_last x row by row, a thread taking V consecutive
// channels of a row; both with 16-byte loads where the layout allows.
#pragma once

#include <array>
#include <atomic>

#include "nabla/ops/cuda/batch_norm/vectors.cuh"
#include "nabla/ops/cuda/reduce/layout.h"

namespace nabla::ops::cuda::batch_norm_detail {

constexpr int kSumThreads = 256;  // threads of every partial-sum block

// Where split s's sum k (0 or 1) of channel c goes among the partials: [C][2][splits], so a
// warp adding one channel's partials reads whole cache lines. The writes, one per channel per
// block, are scattered instead; they are few, and the finishing warps' loads were the slow side.
__device__ __forceinline__ int64_t partial_index(int64_t c, int k, int64_t split, int64_t splits) {
  return (c * 2 + k) * splits + split;
}

// ---- per-channel sums ----------------------------------------------------------------------
//
// A Terms type says what two sums to take per channel: prepare(c) loads what the channel's
// terms share (a Pre); add() accumulates V elements of one channel (contiguous x); load() and
// accumulate() take V elements of V consecutive channels (channels_last x), each into its own
// pair of sums, in two steps: the raw vectors into a Loaded, then their terms.

template <typename T>
struct StatsTerms {  // shifted sums of x: sum(x - k), sum((x - k)^2), k = the channel's first x
  using A = opmath_t<T>;
  using Pre = A;
  const T* x;
  int64_t inner;
  __device__ A prepare(int64_t c) const { return load_as_opmath(x[c * inner]); }
  template <int V>
  __device__ void add(int64_t off, A k, A& s0, A& s1) const {
    A v[V];
    load_vec<T, V>(x + off, v);
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const A d = v[j] - k;
      s0 += d;
      s1 += d * d;
    }
  }
  template <int V>
  struct Loaded {
    Vec<T, V> x;
  };
  template <int V>
  __device__ void load(int64_t off, Loaded<V>& l) const {
    l.x = load_raw<T, V>(x + off);
  }
  template <int V>
  __device__ void accumulate(int64_t, const Loaded<V>& l, const A (&k)[V], A (&s0)[V], A (&s1)[V]) const {
    A v[V];
    widen<T, V>(l.x, v);
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const A d = v[j] - k[j];
      s0[j] += d;
      s1[j] += d * d;
    }
  }
};

template <typename T>
struct GradTerms {  // sum(g), sum(g * (x - mean)), g = dy, masked by the fused ReLU
  using A = opmath_t<T>;
  struct Pre {
    A mean, scale, shift;  // scale and shift: the forward's, where the mask is recomputed
  };
  const T* dy;
  const T* x;
  const T* relu_y;  // the ReLU's output, whose zeros mask dy; null: no mask from y
  const A* mean;
  // Non-null: g is also written here as it is read (the residual's gradient, so the dx pass
  // reads g instead of dy and y). May be dy itself: each element is read before it is written.
  T* masked_out = nullptr;
  // Non-null: the ReLU's mask recomputed from x, relu_passes(batch_normalized(x)) with the
  // forward's coefficients invstd * weight and bias (weight and bias may be null: ones, zeros),
  // instead of read from y (Note [The ReLU's mask from x] in batch_norm/batch_norm.cu).
  const A* invstd = nullptr;
  const A* weight = nullptr;
  const A* bias = nullptr;
  __device__ Pre prepare(int64_t c) const {
    Pre p{mean[c], A(0), A(0)};
    if (invstd) {
      p.scale = weight ? invstd[c] * weight[c] : invstd[c];
      p.shift = bias ? bias[c] : A(0);
    }
    return p;
  }
  // One vector's raw loads, apart from their use (row_sums_kernel keeps several in flight).
  template <int V>
  struct Loaded {
    Vec<T, V> dy, x, y;
  };
  template <int V>
  __device__ void load(int64_t off, Loaded<V>& l) const {
    l.dy = load_raw<T, V>(dy + off);
    l.x = load_raw<T, V>(x + off);
    if (relu_y) l.y = load_raw<T, V>(relu_y + off);
  }
  // g from the loaded values (masked; written to masked_out), and x.
  template <int V>
  __device__ void masked(int64_t off, const Loaded<V>& l, const Pre (&p)[V], A (&g)[V], A (&v)[V]) const {
    widen<T, V>(l.dy, g);
    widen<T, V>(l.x, v);
    if (relu_y) {
      A y[V];
      widen<T, V>(l.y, y);
#pragma unroll
      for (int j = 0; j < V; ++j) g[j] = y[j] > A(0) ? g[j] : A(0);
    }
    if (invstd) {
#pragma unroll
      for (int j = 0; j < V; ++j)
        g[j] = relu_passes<T>(batch_normalized(v[j], p[j].mean, p[j].scale, p[j].shift)) ? g[j] : A(0);
    }
    if (masked_out) store_vec<T, V>(masked_out + off, g);
  }
  template <int V>
  __device__ void add(int64_t off, const Pre& p, A& s0, A& s1) const {
    Pre ps[V];
#pragma unroll
    for (int j = 0; j < V; ++j) ps[j] = p;
    Loaded<V> l;
    load<V>(off, l);
    A g[V], v[V];
    masked<V>(off, l, ps, g, v);
#pragma unroll
    for (int j = 0; j < V; ++j) {
      s0 += g[j];
      s1 += g[j] * (v[j] - p.mean);
    }
  }
  template <int V>
  __device__ void accumulate(int64_t off, const Loaded<V>& l, const Pre (&p)[V], A (&s0)[V],
                             A (&s1)[V]) const {
    A g[V], v[V];
    masked<V>(off, l, p, g, v);
#pragma unroll
    for (int j = 0; j < V; ++j) {
      s0[j] += g[j];
      s1[j] += g[j] * (v[j] - p[j].mean);
    }
  }
};

// Sums v[0..K) over the block; thread 0 gets the totals (in a fixed order).
template <int K, typename A>
__device__ void block_sum(A (&v)[K]) {
  __shared__ A partial[K][32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  for (int k = 0; k < K; ++k) {
    for (int mask = 16; mask > 0; mask /= 2) v[k] += __shfl_xor_sync(0xffffffffu, v[k], mask);
    if (lane == 0) partial[k][warp] = v[k];
  }
  __syncthreads();
  if (threadIdx.x != 0) return;
  for (int k = 0; k < K; ++k) {
    A total = A(0);
    for (int w = 0; w < warps; ++w) total += partial[k][w];
    v[k] = total;
  }
}

// Contiguous x: block (c, split) sums units [split * chunk, +chunk) of channel c, a unit being
// V elements of one plane (inner % V == 0). partial is [C][2][splits] (partial_index).
template <typename T, int V, typename Terms>
__global__ void __launch_bounds__(kSumThreads)
    plane_sums_kernel(Terms terms, int64_t outer, int64_t channels, int64_t inner, int64_t chunk,
                      opmath_t<T>* __restrict__ partial) {
  using A = opmath_t<T>;
  const int64_t c = blockIdx.x, split = blockIdx.y;
  const int64_t row_units = inner / V, units = outer * row_units;
  const int64_t end = std::min(units, (split + 1) * chunk);
  const typename Terms::Pre pre = terms.prepare(c);
  A s[2] = {A(0), A(0)};
  int64_t u = split * chunk + threadIdx.x;
  // (n, i) of unit u, stepped without a division per unit.
  int64_t n = u / row_units, i = u % row_units;
  const int64_t step_n = blockDim.x / row_units, step_i = blockDim.x % row_units;
  for (; u < end; u += blockDim.x) {
    terms.template add<V>((n * channels + c) * inner + i * V, pre, s[0], s[1]);
    i += step_i;
    n += step_n;
    if (i >= row_units) {
      i -= row_units;
      ++n;
    }
  }
  block_sum(s);
  if (threadIdx.x != 0) return;
  partial[partial_index(c, 0, split, gridDim.y)] = s[0];
  partial[partial_index(c, 1, split, gridDim.y)] = s[1];
}

// channels_last x (rows of C): a block is `lanes` threads across the channels, each taking V
// consecutive channels (one 16-byte load where the layout allows), by kSumThreads / lanes
// threads down the rows. Block (g, split) sums rows [split * chunk, +chunk) of channels
// [g * lanes * V, +lanes * V); the threads of a column then add their sums in row order.
struct RowTiles {
  int lanes = 0, rows = 0;  // threads across the channels and down the rows of one block
  int64_t groups = 0;       // blocks across the channels
};

inline RowTiles row_tiles(int64_t channels, int vec) {
  const int64_t lanes = std::min<int64_t>(32, channels / vec);
  return {static_cast<int>(lanes), static_cast<int>(kSumThreads / lanes),
          (channels / vec + lanes - 1) / lanes};
}

template <typename T, int V, typename Terms>
__global__ void __launch_bounds__(kSumThreads, 2)
    row_sums_kernel(Terms terms, int64_t rows, int64_t channels, int lanes, int tile_rows, int64_t chunk,
                    opmath_t<T>* __restrict__ partial) {
  using A = opmath_t<T>;
  __shared__ A sums[2][V][kSumThreads];  // [term][j][row * lanes + lane]
  const int lane = threadIdx.x % lanes, row = threadIdx.x / lanes;
  const int64_t c0 = (int64_t{blockIdx.x} * lanes + lane) * V, split = blockIdx.y;
  const int64_t end = std::min(rows, (split + 1) * chunk);
  const bool active = row < tile_rows && c0 < channels;
  A s0[V], s1[V];
#pragma unroll
  for (int j = 0; j < V; ++j) s0[j] = s1[j] = A(0);
  if (active) {
    typename Terms::Pre pre[V];
#pragma unroll
    for (int j = 0; j < V; ++j) pre[j] = terms.prepare(c0 + j);
    // kRowsInFlight rows' loads issued together, then used in row order (the sums' order is
    // the one-row loop's).
    using Loaded = typename Terms::template Loaded<V>;
    const int64_t step = tile_rows;
    int64_t r = split * chunk + row;
    for (; r + (kRowsInFlight - 1) * step < end; r += kRowsInFlight * step) {
      Loaded l[kRowsInFlight];
#pragma unroll
      for (int u = 0; u < kRowsInFlight; ++u) terms.template load<V>((r + u * step) * channels + c0, l[u]);
#pragma unroll
      for (int u = 0; u < kRowsInFlight; ++u)
        terms.template accumulate<V>((r + u * step) * channels + c0, l[u], pre, s0, s1);
    }
    for (; r < end; r += step) {
      Loaded l;
      terms.template load<V>(r * channels + c0, l);
      terms.template accumulate<V>(r * channels + c0, l, pre, s0, s1);
    }
  }
#pragma unroll
  for (int j = 0; j < V; ++j) {
    sums[0][j][threadIdx.x] = s0[j];
    sums[1][j][threadIdx.x] = s1[j];
  }
  __syncthreads();
  if (row != 0 || c0 >= channels) return;
  for (int k = 0; k < 2; ++k) {
#pragma unroll
    for (int j = 0; j < V; ++j) {
      A total = A(0);
      for (int r = 0; r < tile_rows; ++r) total += sums[k][j][r * lanes + lane];
      partial[partial_index(c0 + j, k, split, gridDim.y)] = total;
    }
  }
}

// Blocks of `Kernel` (kSumThreads each) that `device` (the current one) runs at once: one wave.
// Cached per device, as sm_count is.
template <auto Kernel>
int64_t resident_wave(int device) {
  static std::array<std::atomic<int>, 128> per_sm{};
  NABLA_ASSERT(device >= 0 && device < static_cast<int>(per_sm.size()), "device index {}", device);
  int n = per_sm[device].load(std::memory_order_relaxed);
  if (n == 0) {
    NABLA_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, Kernel, kSumThreads, 0));
    n = std::max(n, 1);
    per_sm[device].store(n, std::memory_order_relaxed);
  }
  return int64_t{n} * sm_count(device);
}

// Launches the partial sums of `terms` over x's layout; returns the [C][2][splits] partials.
// One wave of blocks, each with at least 8192 elements to sum: a second, partial wave left SMs
// idle at the end of the kernel, and more splits cost the finishing warps more loads (8 blocks
// per SM made the 16-bit passes of a ResNet-50 step measurably slower than 2 to 4;
// docs/performance-archive.md).
template <typename T, typename Terms>
Tensor channel_sums(const Terms& terms, const ChannelBlocks& b, int vec, const Tensor& like,
                    cudaStream_t stream, int64_t* splits_out) {
  using A = opmath_t<T>;
  const bool rows_layout = b.inner == 1;  // channels_last
  const RowTiles tiles = rows_layout ? row_tiles(b.channels, vec) : RowTiles{};
  const int64_t groups = rows_layout ? tiles.groups : b.channels;
  const int64_t units = rows_layout ? b.outer : b.outer * (b.inner / vec);
  const int64_t unit_elems = rows_layout ? int64_t{tiles.lanes} * vec : vec;
  const int64_t min_units = std::max<int64_t>(8192 / unit_elems, 1);
  const int device = like.device().index;
  Tensor partial;
  with_width<T>(vec, [&]<int V>() {
    const int64_t wave = rows_layout ? resident_wave<row_sums_kernel<T, V, Terms>>(device)
                                     : resident_wave<plane_sums_kernel<T, V, Terms>>(device);
    int64_t splits = std::min(std::max<int64_t>(wave / groups, 1), (units + min_units - 1) / min_units);
    splits = std::clamp<int64_t>(splits, 1, 65535);
    const int64_t chunk = std::max<int64_t>((units + splits - 1) / splits, 1);
    splits = std::max<int64_t>((units + chunk - 1) / chunk, 1);
    partial = Tensor::empty({splits * 2 * b.channels}, like.options());
    auto* out = static_cast<A*>(partial.data_ptr());
    const dim3 grid(static_cast<unsigned>(groups), static_cast<unsigned>(splits));
    if (rows_layout) {
      row_sums_kernel<T, V>
          <<<grid, kSumThreads, 0, stream>>>(terms, b.outer, b.channels, tiles.lanes, tiles.rows, chunk, out);
    } else {
      plane_sums_kernel<T, V>
          <<<grid, kSumThreads, 0, stream>>>(terms, b.outer, b.channels, b.inner, chunk, out);
    }
    *splits_out = splits;
  });
  NABLA_CUDA_CHECK_LAUNCH();
  return partial;
}

// The two sums of channel c over all splits, taken by one whole warp: lane l adds splits l,
// l + 32, ... into kChains running sums (chain i takes every kChains-th of them), adds the
// chains in order, then a fixed butterfly adds the lanes, so the result does not depend on
// timing, and every lane gets it. A warp, not a thread, because channels_last layers with few
// channels have hundreds of splits; several chains, so that many loads are in flight: with one
// dependent chain of L2 round trips the finishing kernels waited on latency. The loads go
// through L2 (ld.global.cg): the partials were just written by another kernel, so L1 would
// only be polluted by them.
template <typename A>
__device__ void warp_total_of(const A* partial, int64_t splits, int64_t c, A& s0, A& s1) {
  constexpr int kChains = 8;
  const A* p0 = partial + partial_index(c, 0, 0, splits);
  const A* p1 = partial + partial_index(c, 1, 0, splits);
  A a0[kChains], a1[kChains];
#pragma unroll
  for (int i = 0; i < kChains; ++i) a0[i] = a1[i] = A(0);
  int64_t s = threadIdx.x % 32;
  for (; s + 32 * (kChains - 1) < splits; s += 32 * kChains) {
#pragma unroll
    for (int i = 0; i < kChains; ++i) {
      a0[i] += __ldcg(p0 + s + 32 * i);
      a1[i] += __ldcg(p1 + s + 32 * i);
    }
  }
#pragma unroll
  for (int i = 0; i < kChains - 1; ++i) {  // what is left: fewer than kChains loads
    if (s + 32 * i < splits) {
      a0[i] += __ldcg(p0 + s + 32 * i);
      a1[i] += __ldcg(p1 + s + 32 * i);
    }
  }
#pragma unroll
  for (int n = kChains / 2; n > 0; n /= 2) {  // a fixed tree over the chains
#pragma unroll
    for (int i = 0; i < n; ++i) {
      a0[i] += a0[i + n];
      a1[i] += a1[i + n];
    }
  }
  s0 = a0[0];
  s1 = a1[0];
  for (int mask = 16; mask > 0; mask /= 2) {
    s0 += __shfl_xor_sync(0xffffffffu, s0, mask);
    s1 += __shfl_xor_sync(0xffffffffu, s1, mask);
  }
}

// The channel of the calling thread's warp in a finalize kernel (one warp per channel).
__device__ __forceinline__ int64_t warp_channel() {
  return (int64_t{blockIdx.x} * blockDim.x + threadIdx.x) / 32;
}

// Blocks of kSumThreads for one warp per channel.
inline unsigned warp_channel_blocks(int64_t channels) {
  return static_cast<unsigned>((channels * 32 + kSumThreads - 1) / kSumThreads);
}

}  // namespace nabla::ops::cuda::batch_norm_detail
