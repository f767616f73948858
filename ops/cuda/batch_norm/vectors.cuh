// Internal (ops/cuda/batch_norm*.cu only). The vector loads, layout description and elementwise
// loop nabla's batch-norm kernels share: x read in place as `outer` blocks of (C, inner), and V elements
// moved per load where the layout and the pointers allow it.
#pragma once

#include <algorithm>
#include <initializer_list>
#include <type_traits>

#include "nabla/ops/cuda/common.cuh"
#include "nabla/ops/cuda/reduce/layout.h"
#include "nabla/ops/detail/channel_blocks.h"

namespace nabla::ops::cuda::batch_norm_detail {

// V elements of T in one load or store.
template <typename T, int V>
struct alignas(sizeof(T) * V) Vec {
  T v[V];
};

template <typename T, int V>
__device__ __forceinline__ void load_vec(const T* p, opmath_t<T> (&out)[V]) {
  const Vec<T, V> in = *reinterpret_cast<const Vec<T, V>*>(p);
#pragma unroll
  for (int j = 0; j < V; ++j) out[j] = load_as_opmath(in.v[j]);
}

// The raw load, for loops that issue several rows' loads before they use any (kRowsInFlight).
template <typename T, int V>
__device__ __forceinline__ Vec<T, V> load_raw(const T* p) {
  return *reinterpret_cast<const Vec<T, V>*>(p);
}

template <typename T, int V>
__device__ __forceinline__ void widen(const Vec<T, V>& in, opmath_t<T> (&out)[V]) {
#pragma unroll
  for (int j = 0; j < V; ++j) out[j] = load_as_opmath(in.v[j]);
}

// 16-bit pairs round in one packed instruction (cvt.rn.f16x2.f32 / cvt.rn.bf16x2.f32) rather
// than two: the same rounding, half the conversions of the elementwise passes' stores.
template <typename T, int V>
__device__ __forceinline__ void store_vec(T* p, const opmath_t<T> (&in)[V]) {
  Vec<T, V> out;
  if constexpr (V % 2 == 0 && std::is_same_v<T, __half>) {
#pragma unroll
    for (int j = 0; j < V; j += 2) {
      const __half2 h = __floats2half2_rn(in[j], in[j + 1]);
      out.v[j] = h.x;
      out.v[j + 1] = h.y;
    }
  } else if constexpr (V % 2 == 0 && std::is_same_v<T, __nv_bfloat16>) {
#pragma unroll
    for (int j = 0; j < V; j += 2) {
      const __nv_bfloat162 h = __floats2bfloat162_rn(in[j], in[j + 1]);
      out.v[j] = h.x;
      out.v[j + 1] = h.y;
    }
  } else {
#pragma unroll
    for (int j = 0; j < V; ++j) out.v[j] = store_from<T>(in[j]);
  }
  *reinterpret_cast<Vec<T, V>*>(p) = out;
}

template <typename P>
P* ptr(const Tensor& t) {
  return t.defined() ? static_cast<P*>(t.data_ptr()) : nullptr;
}

inline bool aligned_to(const void* p, size_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

// The widest vector (up to 16 bytes) whose V consecutive elements share one channel (contiguous
// x: inner % V == 0) or are V consecutive channels (channels_last: C % V == 0), with every
// pointer aligned to it.
template <typename T>
int vector_width(const ChannelBlocks& b, std::initializer_list<const void*> ptrs) {
  for (int v = static_cast<int>(16 / sizeof(T)); v > 1; v /= 2) {
    if ((b.inner > 1 ? b.inner : b.channels) % v != 0) continue;
    if (std::all_of(ptrs.begin(), ptrs.end(),
                    [&](const void* p) { return !p || aligned_to(p, sizeof(T) * v); }))
      return v;
  }
  return 1;
}

// Calls fn.template operator()<V>() for the runtime width v (1, 2, 4 or 8, at most 16 bytes).
template <typename T, typename Fn>
void with_width(int v, Fn&& fn) {
  if constexpr (sizeof(T) <= 2) {
    if (v == 8) return fn.template operator()<8>();
  }
  if constexpr (sizeof(T) <= 4) {
    if (v == 4) return fn.template operator()<4>();
  }
  if constexpr (sizeof(T) <= 8) {
    if (v == 2) return fn.template operator()<2>();
  }
  fn.template operator()<1>();
}

// The normalized value before the fused ReLU, (x - mean) * scale + shift, as one fused
// multiply-add: the forward writes it and a backward that recomputes the ReLU's mask from x
// (relu_passes) must see the same value bit for bit, so both call this.
template <typename A>
__device__ __forceinline__ A batch_normalized(A x, A mean, A scale, A shift) {
  return fma(x - mean, scale, shift);
}

// Whether the ReLU let the gradient through at a normalized value `pre`: whether the output
// the forward stored, relu(pre) rounded to T, is positive. A positive float at or below half of
// T's smallest subnormal rounds to a zero output (round to nearest, ties to even: float16's
// smallest is 2^-24, bfloat16's 2^-133), so `pre > 0` alone is not the same mask. One compare
// with that bound is the same test as rounding and widening again, in a third of the
// instructions of the backward's hottest loop.
template <typename T>
__device__ __forceinline__ bool relu_passes(opmath_t<T> pre) {
  if constexpr (std::is_same_v<T, __half>) {
    return pre > 0x1p-25f;
  } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return pre > 0x1p-134f;
  } else {
    return pre > opmath_t<T>(0);
  }
}

// K coefficients of the V channels of one vector: V consecutive channels (channels_last rows,
// one vector load per coefficient) or one channel repeated (contiguous planes).
template <typename A, int V, int K>
struct ChannelCoefs {
  A v[K][V];
  __device__ __forceinline__ void load_row(const A* __restrict__ coef, int64_t channels, int64_t c0) {
#pragma unroll
    for (int k = 0; k < K; ++k) load_vec<A, V>(coef + k * channels + c0, v[k]);
  }
  __device__ __forceinline__ void load_plane(const A* __restrict__ coef, int64_t channels, int64_t c) {
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const A value = coef[k * channels + c];
#pragma unroll
      for (int j = 0; j < V; ++j) v[k][j] = value;
    }
  }
};

// Threads for an elementwise pass: enough for 16 vectors each, but at least two blocks per SM
// where there are that many vectors (a small activation would leave SMs idle otherwise), and at
// least one thread per vector of a channels_last row (for_each_vector). Each thread loads its
// channels' coefficients once (up to 7 vectors of them), so a thread with 4 vectors spent more
// loads on coefficients than on data; 16 made the 16-bit passes of a ResNet-50 step measurably
// faster (docs/performance-archive.md).
inline constexpr int kVectorsPerThread = 16;

inline unsigned elementwise_blocks(int device, int64_t numel, int64_t channels, int64_t inner, int vec) {
  const int64_t vectors = numel / vec, row_vectors = inner == 1 ? channels / vec : 1;
  const unsigned fill = std::min(blocks_for(vectors), static_cast<unsigned>(2 * sm_count(device)));
  return std::max({blocks_for(vectors, kVectorsPerThread), fill,
                   static_cast<unsigned>((row_vectors + kBlockSize - 1) / kBlockSize)});
}

// Rows of a channels_last activation whose loads a thread issues together before it uses any of
// them. One row at a time left too few bytes in flight to reach the GPU's memory bandwidth: a
// backward pass over ResNet-50's batch norms ran well below it (docs/performance-archive.md).
inline constexpr int kRowsInFlight = 2;

// Calls load(offset, u) and then finish(offset, u, coefs) for every V-element vector of x's
// layout, with its channels' coefficients; on channels_last rows, loads for kRowsInFlight rows
// first, then finishes for each, u naming the slot of the caller's per-row registers. A
// thread's finish may store over what its own load read (dx over dy), never over another
// vector's. On channels_last rows each thread keeps one set of V channels for all its rows, so
// it loads their coefficients once: per element, looking them up would cost more than the data
// (a warp's 32 lanes touch 32 channels, up to 8 cache lines a coefficient). Consecutive threads
// take consecutive vectors of a row, then of the next row: coalesced.
template <typename A, int V, int K, typename Load, typename Finish>
__device__ __forceinline__ void for_each_vector_batched(int64_t numel, int64_t channels, int64_t inner,
                                                        const A* __restrict__ coef, Load&& load,
                                                        Finish&& finish) {
  const int64_t tid = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  const int64_t threads = int64_t{gridDim.x} * blockDim.x;
  ChannelCoefs<A, V, K> k;
  if (inner == 1) {
    // 32-bit division: the grid has fewer than 2^31 threads (blocks_for caps it), and a 64-bit
    // one costs a thread with few rows more instructions than its data.
    const auto cols = static_cast<uint32_t>(channels / V), t = static_cast<uint32_t>(tid);
    const int64_t rows = numel / channels;
    const int64_t row_step = static_cast<uint32_t>(threads) / cols;  // >= 1 (elementwise_blocks)
    if (tid >= row_step * cols) return;
    const int64_t col = t % cols;
    k.load_row(coef, channels, col * V);
    int64_t r = t / cols;
    for (; r + (kRowsInFlight - 1) * row_step < rows; r += kRowsInFlight * row_step) {
#pragma unroll
      for (int u = 0; u < kRowsInFlight; ++u) load((r + u * row_step) * channels + col * V, u);
#pragma unroll
      for (int u = 0; u < kRowsInFlight; ++u) finish((r + u * row_step) * channels + col * V, u, k);
    }
    for (; r < rows; r += row_step) {
      load(r * channels + col * V, 0);
      finish(r * channels + col * V, 0, k);
    }
    return;
  }
  for (int64_t g = tid; g < numel / V; g += threads) {
    k.load_plane(coef, channels, (g * V / inner) % channels);
    load(g * V, 0);
    finish(g * V, 0, k);
  }
}

// Calls body(offset, coefs) for every V-element vector of x's layout, with its channels'
// coefficients, one row at a time (for_each_vector_batched's loop without its loads ahead: the
// batch-norm-from-sums kernels timed with it).
template <typename A, int V, int K, typename Body>
__device__ __forceinline__ void for_each_vector(int64_t numel, int64_t channels, int64_t inner,
                                                const A* __restrict__ coef, Body&& body) {
  const int64_t tid = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  const int64_t threads = int64_t{gridDim.x} * blockDim.x;
  ChannelCoefs<A, V, K> k;
  if (inner == 1) {
    // 32-bit division: the grid has fewer than 2^31 threads (blocks_for caps it), and a 64-bit
    // one costs a thread with few rows more instructions than its data.
    const auto cols = static_cast<uint32_t>(channels / V), t = static_cast<uint32_t>(tid);
    const int64_t rows = numel / channels;
    const int64_t row_step = static_cast<uint32_t>(threads) / cols;  // >= 1 (elementwise_blocks)
    if (tid >= row_step * cols) return;
    const int64_t col = t % cols;
    k.load_row(coef, channels, col * V);
    for (int64_t r = t / cols; r < rows; r += row_step) body(r * channels + col * V, k);
    return;
  }
  for (int64_t g = tid; g < numel / V; g += threads) {
    k.load_plane(coef, channels, (g * V / inner) % channels);
    body(g * V, k);
  }
}

}  // namespace nabla::ops::cuda::batch_norm_detail
