// Internal (ops/cuda). The shape of a reduction launch over the (A, O, B, I) block of Note
// [Reduction layout] (ops/detail/reduce_layout.h): shared by the eager reductions
// (reduce/launch.cuh) and the step compiler's generated ones (ops/cuda/fusion), which must choose
// the same blocks and splits to add in the same order. Plain C++ that NVRTC also compiles (the
// build embeds it); the planner itself is host code.
#pragma once

#include <cstdint>

namespace nabla::ops::cuda::reduction {

struct Geometry {
  int64_t a, o, b, i;
  int64_t reduce;   // a * b elements per output
  int64_t outputs;  // o * i
  int64_t chunk;    // reduced elements per split
  int64_t splits;   // gridDim.y
};

#ifndef __CUDACC_RTC__
// How a reduction of the block runs: the rows kernel (I == 1) or the columns kernel, its block
// and grid, and with splits > 1 a partials buffer of outputs * splits accumulators that
// reduce_partials folds. `vector` is how many input elements make 16 bytes.
struct LaunchShape {
  Geometry g;
  bool rows;
  unsigned block_x, block_y;
  unsigned grid_x, grid_y;
};
LaunchShape plan_launch(int64_t a, int64_t o, int64_t b, int64_t i, int64_t sms, int vector);

// Whether plan_launch runs every one of `rows` contiguous rows (A == 1, I == 1) of b elements in
// one split on any device of at most max_sms SMs: a warp path for rows of at most 1024 elements,
// a block path of 256 or 512 lanes whose split takes 16 elements a lane (at most 4096 or 8192
// elements: one split), or at least 4 rows per SM. The step compiler's one-pass rows rely on it
// (Note [One-pass rows] in ops/fusion/plan.cpp); keep it in step with plan_launch.
inline bool rows_never_split(int64_t b, int64_t rows, int64_t max_sms) {
  return b <= 8192 || rows >= 4 * max_sms;
}

inline int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

inline unsigned pow2_at_least(int64_t n, unsigned cap) {
  unsigned p = 1;
  while (p < cap && p < n) p *= 2;
  return p;
}
#endif

}  // namespace nabla::ops::cuda::reduction
