// Internal (ops/cuda only). How the CUDA reductions and softmax see their input, and the pieces
// the reduction files share. Host code only: the kernels live in reduce_launch.cuh.
//
// Note [CUDA reduction layout]
// Like the CPU (Note [Reduction layout] in ops/cpu/reduce.cpp), a reduction reads a dense input
// in place, as a block in memory order. The CUDA block has one more level, (A, O, B, I): A and B
// are runs of reduced dims, O and I runs of kept dims, so element (ra, o, rb, i) sits at
// ((ra * O + o) * B + rb) * I + i. That covers the reductions batch norm needs without a copy:
// per-channel statistics of an NCHW tensor are (N, C, H*W, 1), of a channels_last tensor
// (1, 1, N*H*W, C). Reduction element r is (r / B, r % B); output k is (k / I, k % I), so the
// result is dense over the kept dims in the input's memory order. Inputs that are not dense,
// or whose reduced dims form more runs than (A, O, B, I) holds, are first copied into
// (kept..., reduced...) order. A single reduced dim is always B (A = 1), so r is its coordinate.
#pragma once

#include <vector>

#include "nabla/core/tensor.h"
#include "nabla/ops/iteration.h"

namespace nabla::ops::cuda {

struct ReduceLayout {
  Tensor input;  // dense
  int64_t a = 1, o = 1, b = 1, i = 1;
  Shape out_strides;  // per dim of the keepdim shape: its stride in the dense (O, I) result

  int64_t reduce_size() const { return a * b; }
  int64_t outputs() const { return o * i; }
};

ReduceLayout plan_reduce_layout(const Tensor& x, const std::vector<bool>& reduced);

// Kernels write a result laid out by `strides` into ops::output_buffer(out, strides)
// (ops/iteration.h); finish_output() copies it into `out` when that was a temporary.
using ops::output_buffer;
void finish_output(const Tensor& buffer, const Tensor& out, const Shape& strides);

// Streaming multiprocessors of a device (queried once per device).
int sm_count(int device);

// Launchers split by file to keep nvcc's work per file small; each writes a dense (O, I)
// result through `out`'s data pointer.
void reduce_sum(const ReduceLayout& layout, const Tensor& out, bool mean);  // reduce_sum.cu
void reduce_var(const ReduceLayout& layout, const Tensor& out, int64_t correction);
void reduce_norm(const ReduceLayout& layout, const Tensor& out, double p);  // reduce_norm.cu
// `indices` may be undefined (values only).
void reduce_extreme(const ReduceLayout& layout, bool is_max, const Tensor& values,
                    const Tensor& indices);  // reduce_extreme.cu

}  // namespace nabla::ops::cuda
