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
