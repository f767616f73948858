// Internal. CUDA kernels for indexing, in plain C++ so front ends compile without nvcc. Same
// contracts as ops/cpu/indexing_kernels.h: the front end validates shapes (and index values, with
// check_indices on the device) and allocates; these only move and add elements. Index tensors are
// int64.
#pragma once

#include <cstdint>
#include <string>

#include "nabla/core/tensor.h"

namespace nabla::ops::cuda {

// Checks on the device that every index is in [0, bound), without waiting: the first that is not
// is reported, with `message` (a format with one {} for the value), at the host's next wait for
// the device (Note [Checks on the device] in core/cuda/device_checks.h). The kernels below skip
// such an index, so they stay inside their tensors meanwhile.
void check_indices(const Tensor& index, int64_t bound, const std::string& message);

// out.select(dim, i) = x.select(dim, index[i]); index is 1-d (or 0-d).
void index_select(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& out);
// out.select(dim, index[i]) += source.select(dim, i), repeats accumulating (atomics, so float
// sums may differ from the CPU in rounding order).
void index_add_(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& source);
// out.select(dim, index[i]) = source.select(dim, i); of repeated entries an unspecified one's
// slice stays.
void index_copy_(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& source);
// out[p] = x[p with coordinate `dim` replaced by index[p]], over every position p of index.
void gather(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& out);
// out[p with coordinate `dim` replaced by index[p]] += src[p], over every position p of index.
void scatter_add_(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src);

}  // namespace nabla::ops::cuda
