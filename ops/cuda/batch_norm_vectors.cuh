// Internal (ops/cuda/batch_norm.cu only). The vector loads and layout description nabla's
// batch-norm kernels share: x read in place as `outer` blocks of (C, inner), and V elements moved
// per load where the layout and the pointers allow it.
#pragma once

#include <algorithm>
#include <initializer_list>

#include "nabla/ops/cuda/common.cuh"
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

template <typename T, int V>
__device__ __forceinline__ void store_vec(T* p, const opmath_t<T> (&in)[V]) {
  Vec<T, V> out;
#pragma unroll
  for (int j = 0; j < V; ++j) out.v[j] = store_from<T>(in[j]);
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

// dy through a ReLU whose output was y (zero where y <= 0); dy itself without one.
template <typename T, int V>
__device__ __forceinline__ void load_grad(const T* dy, const T* relu_y, int64_t off, opmath_t<T> (&g)[V]) {
  load_vec<T, V>(dy + off, g);
  if (!relu_y) return;
  opmath_t<T> y[V];
  load_vec<T, V>(relu_y + off, y);
#pragma unroll
  for (int j = 0; j < V; ++j) g[j] = y[j] > opmath_t<T>(0) ? g[j] : opmath_t<T>(0);
}

}  // namespace nabla::ops::cuda::batch_norm_detail
