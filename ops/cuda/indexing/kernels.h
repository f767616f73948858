// Internal. CUDA kernels for indexing, in plain C++ so front ends compile without nvcc. Same
// contracts as ops/cpu/indexing_kernels.h: the front end validates shapes and index values and
// allocates; these only move and add elements. Index tensors are int64.
#pragma once

#include <cstdint>
#include <utility>

#include "nabla/core/tensor.h"

namespace nabla::ops::cuda {

// The smallest and largest value of a non-empty index tensor. This waits for the device (one
// small copy to the host): it is the price of checking index values before a kernel writes.
std::pair<int64_t, int64_t> index_range(const Tensor& index);

// out.select(dim, i) = x.select(dim, index[i]); index is 1-d (or 0-d).
void index_select(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& out);
// out.select(dim, index[i]) += source.select(dim, i), repeats accumulating (atomics, so float
// sums may differ from the CPU in rounding order).
void index_add_(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& source);
// out[p] = x[p with coordinate `dim` replaced by index[p]], over every position p of index.
void gather(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& out);
// out[p with coordinate `dim` replaced by index[p]] += src[p], over every position p of index.
void scatter_add_(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src);

}  // namespace nabla::ops::cuda
