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

// One operand of an iteration: its sizes and strides (its own dims, aligned right against the
// iteration's, broadcasting where a size is 1 or a dim is missing) and the unit its strides are
// counted in (an item's bytes, or 1 for elements).
struct IterationOperand {
  const Shape& sizes;
  const Shape& strides;
  int64_t unit = 1;
};

// The iteration over `sizes` of the operands (the first one the output, whose strides order the
// dims): dims of size 1 dropped, the rest ordered by the first operand's strides, largest first,
// and neighbours contiguous in every operand merged. Strides come out in each operand's unit,
// outermost first; one element (or none) is one dense dim.
struct CoalescedDims {
  std::vector<int64_t> sizes;
  std::vector<std::vector<int64_t>> strides;  // [operand][dim]
};

inline CoalescedDims coalesce_dims(const Shape& sizes, const std::vector<IterationOperand>& operands) {
  const auto nd = static_cast<int64_t>(sizes.size());
  const size_t n = operands.size();
  std::vector<std::vector<int64_t>> strides(n);
  for (size_t k = 0; k < n; ++k) {
    const IterationOperand& t = operands[k];
    const auto td = static_cast<int64_t>(t.sizes.size());
    NABLA_ASSERT(td <= nd, "elementwise operand has more dims than the output");
    strides[k].assign(nd, 0);
    const int64_t off = nd - td;
    for (int64_t d = 0; d < td; ++d) {
      strides[k][off + d] = t.sizes[d] == 1 && sizes[off + d] != 1 ? 0 : t.strides[d] * t.unit;
    }
  }
  std::vector<int64_t> order;
  for (int64_t d = 0; d < nd; ++d) {
    if (sizes[d] != 1) order.push_back(d);
  }
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return strides[0][a] > strides[0][b]; });
  CoalescedDims out;
  out.strides.resize(n);
  for (int64_t d : order) {
    bool merge = !out.sizes.empty();
    for (size_t k = 0; k < n && merge; ++k) merge = out.strides[k].back() == strides[k][d] * sizes[d];
    if (merge) {
      out.sizes.back() *= sizes[d];
      for (size_t k = 0; k < n; ++k) out.strides[k].back() = strides[k][d];
    } else {
      out.sizes.push_back(sizes[d]);
      for (size_t k = 0; k < n; ++k) out.strides[k].push_back(strides[k][d]);
    }
  }
  if (out.sizes.empty()) {  // one element (or none): call it dense
    out.sizes.push_back(1);
    for (size_t k = 0; k < n; ++k) out.strides[k].push_back(operands[k].unit);
  }
  return out;
}

template <int N>
IterationPlan<N> plan_iteration(const std::array<const Tensor*, N>& operands) {
  IterationPlan<N> plan;
  std::vector<IterationOperand> dims;
  dims.reserve(N);
  for (int k = 0; k < N; ++k) {
    const Tensor& t = *operands[k];
    dims.push_back({t.sizes(), t.strides(), static_cast<int64_t>(t.itemsize())});
    plan.data[k] = static_cast<char*>(t.data_ptr());
  }
  plan.numel = operands[0]->numel();
  CoalescedDims c = coalesce_dims(operands[0]->sizes(), dims);
  plan.sizes = std::move(c.sizes);
  for (int k = 0; k < N; ++k) plan.strides[k] = std::move(c.strides[k]);
  return plan;
}

// Dims of t of size > 1, largest stride first (t's memory order; reductions use it to read any
// layout, channels_last included, in place).
inline std::vector<int64_t> memory_order(const Shape& sizes, const Shape& strides) {
  std::vector<int64_t> order;
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] != 1) order.push_back(static_cast<int64_t>(d));
  }
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return strides[a] > strides[b]; });
  return order;
}
inline std::vector<int64_t> memory_order(const Tensor& t) {
  return memory_order(t.sizes(), t.strides());
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
