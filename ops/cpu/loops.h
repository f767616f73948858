// Internal (CPU kernels). Elementwise iteration over strided, broadcast operands.
//
// A LoopPlan describes N operands (output first) over one iteration shape, with per-operand
// strides in bytes (0 where an input is broadcast). make_plan() orders the dims so that the
// output's fastest dim is innermost (channels_last outputs iterate in NHWC order) and merges
// dims that are contiguous for every operand, so a dense tensor becomes one flat row.
// for_each_row() then hands out rows: a base pointer per operand, the row length and the inner
// strides. Rows are split across OpenMP threads when the work is big enough to pay for it.
#pragma once

#include <omp.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <vector>

#include "nabla/core/tensor.h"
#include "nabla/ops/detail/iteration.h"

namespace nabla::ops::cpu {

using ops::IterationPlan;
using ops::plan_iteration;

// Elements below which an op runs on one thread. Every OpenMP region ends in a barrier that waits
// for the slowest thread; when the cores are shared (data-loader threads, other processes) that
// thread may not be running, and the waiting threads spin (libgomp's default wait policy). So
// only ops with about a millisecond of memory traffic go parallel. Measured on SmallCnn's CPU
// step, 2 threads on 2 loaded cores: 2^20 ran 15% faster than 2^15 with spinning waits, and 4%
// slower with OMP_WAIT_POLICY=passive (which itself made the step 3x faster there).
inline constexpr int64_t kParallelGrain = int64_t{1} << 20;

template <int N>
using LoopPlan = IterationPlan<N>;

// operands[0] is the output; the others are broadcast to its shape (see ops/detail/iteration.h).
template <int N>
LoopPlan<N> make_plan(const std::array<const Tensor*, N>& operands) {
  return plan_iteration<N>(operands);
}

// fn(std::array<char*, N> ptrs, int64_t n, const std::array<int64_t, N>& inner_strides)
template <int N, typename Fn>
void for_each_row(const LoopPlan<N>& plan, Fn&& fn) {
  if (plan.numel == 0) return;
  const int64_t nd = static_cast<int64_t>(plan.sizes.size());
  const int64_t inner = plan.sizes.back();
  const int64_t rows = plan.numel / inner;
  std::array<int64_t, N> inner_strides;
  for (int k = 0; k < N; ++k) inner_strides[k] = plan.strides[k].back();

  auto run_rows = [&](int64_t begin, int64_t end) {
    // Unravel `begin` once, then step the outer index like an odometer.
    std::vector<int64_t> index(nd > 1 ? nd - 1 : 0, 0);
    int64_t r = begin;
    for (int64_t d = nd - 2; d >= 0; --d) {
      index[d] = r % plan.sizes[d];
      r /= plan.sizes[d];
    }
    for (int64_t row = begin; row < end; ++row) {
      std::array<char*, N> ptrs = plan.data;
      for (int64_t d = 0; d < nd - 1; ++d) {
        for (int k = 0; k < N; ++k) ptrs[k] += index[d] * plan.strides[k][d];
      }
      fn(ptrs, inner, inner_strides);
      for (int64_t d = nd - 2; d >= 0; --d) {
        if (++index[d] < plan.sizes[d]) break;
        index[d] = 0;
      }
    }
  };

  if (plan.numel < kParallelGrain || omp_get_max_threads() == 1 || omp_in_parallel()) {
    run_rows(0, rows);
    return;
  }
  if (rows == 1) {
    // One long row: split it instead.
#pragma omp parallel
    {
      int64_t nt = omp_get_num_threads(), t = omp_get_thread_num();
      int64_t chunk = (inner + nt - 1) / nt, b = t * chunk, e = std::min(inner, b + chunk);
      if (b < e) {
        std::array<char*, N> ptrs = plan.data;
        for (int k = 0; k < N; ++k) ptrs[k] += b * inner_strides[k];
        fn(ptrs, e - b, inner_strides);
      }
    }
    return;
  }
#pragma omp parallel
  {
    int64_t nt = omp_get_num_threads(), t = omp_get_thread_num();
    int64_t chunk = (rows + nt - 1) / nt, b = t * chunk, e = std::min(rows, b + chunk);
    if (b < e) run_rows(b, e);
  }
}

// Applies fn elementwise: out = fn(in...) with each input loaded as compute_t and the result
// stored as Out. All inputs have type In (front ends cast mixed inputs first).
template <typename Out, typename In, int N, typename Fn>
void elementwise(const LoopPlan<N>& plan, Fn fn) {
  for_each_row<N>(plan, [&](std::array<char*, N> p, int64_t n, const std::array<int64_t, N>& s) {
    auto load = [&](int k, int64_t i) {
      return static_cast<compute_t<In>>(*reinterpret_cast<const In*>(p[k] + i * s[k]));
    };
    Out* out = reinterpret_cast<Out*>(p[0]);
    const int64_t so = s[0] / static_cast<int64_t>(sizeof(Out));
    bool dense = s[0] == static_cast<int64_t>(sizeof(Out));
    for (int k = 1; k < N; ++k) dense = dense && s[k] == static_cast<int64_t>(sizeof(In));
    if constexpr (N == 2) {
      const In* a = reinterpret_cast<const In*>(p[1]);
      if (dense) {
        for (int64_t i = 0; i < n; ++i) out[i] = static_cast<Out>(fn(static_cast<compute_t<In>>(a[i])));
      } else {
        for (int64_t i = 0; i < n; ++i) out[i * so] = static_cast<Out>(fn(load(1, i)));
      }
    } else if constexpr (N == 3) {
      const In* a = reinterpret_cast<const In*>(p[1]);
      const In* b = reinterpret_cast<const In*>(p[2]);
      if (dense) {
        for (int64_t i = 0; i < n; ++i) {
          out[i] = static_cast<Out>(fn(static_cast<compute_t<In>>(a[i]), static_cast<compute_t<In>>(b[i])));
        }
      } else {
        for (int64_t i = 0; i < n; ++i) out[i * so] = static_cast<Out>(fn(load(1, i), load(2, i)));
      }
    } else {
      static_assert(N == 4, "elementwise supports 1 to 3 inputs");
      for (int64_t i = 0; i < n; ++i) out[i * so] = static_cast<Out>(fn(load(1, i), load(2, i), load(3, i)));
    }
  });
}

}  // namespace nabla::ops::cpu
