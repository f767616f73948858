// Internal (ops). The layout planner of the reductions and softmax, shared by both backends.
//
// Note [Reduction layout]
// A reduction reads a dense input in place, as a block in memory order: (A, O, B, I), where A
// and B are runs of reduced dims and O and I runs of kept dims, taken largest stride first over
// the dims of size > 1. Element (ra, o, rb, i) sits at ((ra * O + o) * B + rb) * I + i;
// reduction element r is (r / B, r % B) and output k is (k / I, k % I), so the result is dense
// over the kept dims in the input's memory order. A backend says which blocks its kernels take:
//   - ReduceBlock::one_run (the CPU's kernels): A = 1, the reduced dims are one run. A contiguous
//     (N, C) summed over dim 0 is (1, N, C); a channels_last (N, C, H, W) averaged over (0, 2, 3)
//     is (1, N*H*W, C); a transposed matrix reduced over its last logical dim is (1, R, inner).
//   - ReduceBlock::two_runs (the CUDA kernels): also R K R K, which covers the per-channel
//     statistics of an NCHW tensor, (N, C, H*W, 1), without a copy.
// Inputs that are not dense, or whose reduced dims form more runs than the block holds, are first
// copied into (kept..., reduced...) order, where I = 1. A single reduced dim is one run, always B
// (A = 1), so r is its coordinate and softmax never copies a dense input.
//
// When `out` does not have the result's strides (a keepdim output of a transposed input), the
// kernels write a temporary (output_buffer, ops/detail/iteration.h) and finish_output copies it over.
// Reductions over no elements never get here: the front end (ops/reduce.cpp) fills their results.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "nabla/core/tensor.h"

namespace nabla::ops {

enum class ReduceBlock : uint8_t { one_run, two_runs };

struct ReduceLayout {
  Tensor input;  // dense
  int64_t a = 1, o = 1, b = 1, i = 1;
  Shape out_strides;  // per dim of the keepdim shape: its stride in the dense (O, I) result

  int64_t reduce_size() const { return a * b; }
  int64_t outputs() const { return o * i; }
};

// mask[d] is true for the dims in `dims`.
std::vector<bool> reduced_mask(int64_t ndim, const Shape& dims);

ReduceLayout plan_reduce_layout(const Tensor& x, const std::vector<bool>& reduced, ReduceBlock block);
// The layout of an input of these sizes and strides when it is read in place, without a copy
// (the step compiler's fused reductions, which have no input tensor to copy): nullopt when it is
// not dense or its runs do not fit the block. `input` stays undefined.
std::optional<ReduceLayout> plan_reduce_layout_in_place(const Shape& sizes, const Shape& strides,
                                                        const std::vector<bool>& reduced, ReduceBlock block);

// Softmax along `dim`: one reduced dim, so (1, O, R, I) over x's own memory when x is dense.
ReduceLayout plan_softmax_layout(const Tensor& x, int64_t dim);

// Where softmax writes its result in the layout of `layout.input`: `out` when it has that layout
// already, else a temporary for finish_softmax to copy into `out`.
Tensor softmax_buffer(const ReduceLayout& layout, const Tensor& out);
void finish_softmax(const Tensor& buffer, const Tensor& out);

// Copies a reduction result written with `strides` (output_buffer) into `out` when it went
// to a temporary.
void finish_output(const Tensor& buffer, const Tensor& out, const Shape& strides);

// A reduction over `dims` of a non-empty input, planned: the input's layout and, for each output
// (keepdim-shaped), the buffer its kernel writes densely over the kept dims.
struct ReductionPlan {
  ReduceLayout layout;
  TensorList buffers;
  TensorList outputs;

  // Copies each buffer that is a temporary into its output.
  void finish() const;
};
ReductionPlan plan_reduction(const Tensor& x, const Shape& dims, ReduceBlock block, TensorList outputs);

}  // namespace nabla::ops
