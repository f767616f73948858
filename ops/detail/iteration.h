// Internal (ops backends). Planning an elementwise iteration on the host, shared by the CPU
// loops (ops/cpu/loops.h) and the CUDA launcher (ops/cuda/elementwise/elementwise.cuh).
//
// operands[0] is the output; the others broadcast to its shape (stride 0 where they do). Dims of
// size 1 are dropped, the rest are ordered by the output's strides, largest first (so a
// channels_last output is walked in NHWC order), and neighbours that are contiguous in every
// operand are merged, so a dense tensor becomes one flat dim. Strides are in bytes.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <vector>

#include "nabla/core/tensor.h"

namespace nabla::ops {

template <int N>
struct IterationPlan {
  std::vector<int64_t> sizes;                   // outermost first
  std::array<std::vector<int64_t>, N> strides;  // bytes, per operand, same order as sizes
  std::array<char*, N> data{};
  int64_t numel = 0;
};

template <int N>
IterationPlan<N> plan_iteration(const std::array<const Tensor*, N>& operands) {
  IterationPlan<N> plan;
  const Tensor& out = *operands[0];
  const int64_t nd = out.dim();
  plan.numel = out.numel();
  const Shape& sizes = out.sizes();
  std::array<std::vector<int64_t>, N> strides;
  for (int k = 0; k < N; ++k) {
    const Tensor& t = *operands[k];
    NABLA_ASSERT(t.dim() <= nd, "elementwise operand has more dims than the output");
    strides[k].assign(nd, 0);
    const int64_t off = nd - t.dim();
    const auto item = static_cast<int64_t>(t.itemsize());
    for (int64_t d = 0; d < t.dim(); ++d) {
      strides[k][off + d] = t.size(d) == 1 && sizes[off + d] != 1 ? 0 : t.stride(d) * item;
    }
    plan.data[k] = static_cast<char*>(t.data_ptr());
  }
  std::vector<int64_t> order;
  for (int64_t d = 0; d < nd; ++d) {
    if (sizes[d] != 1) order.push_back(d);
  }
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return strides[0][a] > strides[0][b]; });
  std::vector<int64_t> s;
  std::array<std::vector<int64_t>, N> st;
  for (int64_t d : order) {
    bool merge = !s.empty();
    for (int k = 0; k < N && merge; ++k) merge = st[k].back() == strides[k][d] * sizes[d];
    if (merge) {
      s.back() *= sizes[d];
      for (int k = 0; k < N; ++k) st[k].back() = strides[k][d];
    } else {
      s.push_back(sizes[d]);
      for (int k = 0; k < N; ++k) st[k].push_back(strides[k][d]);
    }
  }
  if (s.empty()) {  // one element (or none): call it dense
    s.push_back(1);
    for (int k = 0; k < N; ++k) st[k].push_back(static_cast<int64_t>(operands[k]->itemsize()));
  }
  plan.sizes = std::move(s);
  plan.strides = std::move(st);
  return plan;
}

// Dims of t of size > 1, largest stride first (t's memory order; reductions use it to read any
// layout, channels_last included, in place).
inline std::vector<int64_t> memory_order(const Tensor& t) {
  std::vector<int64_t> order;
  for (int64_t d = 0; d < t.dim(); ++d) {
    if (t.size(d) != 1) order.push_back(d);
  }
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return t.stride(a) > t.stride(b); });
  return order;
}

// Dense strides for `sizes` whose memory order is `order` (a permutation of the dims of size > 1).
inline Shape dense_strides_in_order(const Shape& sizes, const std::vector<int64_t>& order) {
  Shape strides(sizes.size(), 1);
  int64_t running = 1;
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    strides[*it] = running;
    running *= sizes[*it];
  }
  return strides;
}

// Strides of a reduction's dense result, per dim of the keepdim shape: the kept dims of
// `sizes` in memory order `order`, reduced dims 0.
inline Shape reduced_output_strides(const Shape& sizes, const std::vector<int64_t>& order,
                                    const std::vector<bool>& reduced) {
  Shape strides(sizes.size(), 0);
  int64_t running = 1;
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    if (reduced[*it]) continue;
    strides[*it] = running;
    running *= sizes[*it];
  }
  return strides;
}

// Where a kernel writes a dense result laid out by `strides`: `out` itself when its strides
// agree, else a temporary that the backend then copies into `out`.
inline Tensor output_buffer(const Tensor& out, const Shape& strides) {
  for (int64_t d = 0; d < out.dim(); ++d) {
    if (out.size(d) > 1 && out.stride(d) != strides[d]) {
      return Tensor::empty({out.numel()}, {.dtype = out.dtype(), .device = out.device()});
    }
  }
  return out;
}

}  // namespace nabla::ops
