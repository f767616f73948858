// Internal (ops/cuda only). The pieces the CUDA reduction files share: the launchers, each in
// its own .cu file, and the device's SM count. Host code only: the kernels live in
// reduce/launch.cuh. They read the (A, O, B, I) block of Note [Reduction layout]
// (ops/detail/reduce_layout.h), which the shared planner makes with ReduceBlock::two_runs.
#pragma once

#include <vector>

#include "nabla/core/tensor.h"
#include "nabla/ops/detail/iteration.h"
#include "nabla/ops/detail/reduce_layout.h"

namespace nabla::ops::cuda {

// Streaming multiprocessors of a device (queried once per device).
int sm_count(int device);

// Launchers split by file to keep nvcc's work per file small; each writes a dense (O, I)
// result through `out`'s data pointer.
void reduce_sum(const ReduceLayout& layout, const Tensor& out, bool mean);  // reduce/sum.cu
void reduce_var(const ReduceLayout& layout, const Tensor& out, int64_t correction);
void reduce_norm(const ReduceLayout& layout, const Tensor& out, double p);  // reduce/norm.cu
// `indices` may be undefined (values only).
void reduce_extreme(const ReduceLayout& layout, bool is_max, const Tensor& values,
                    const Tensor& indices);  // reduce/extreme.cu

}  // namespace nabla::ops::cuda
