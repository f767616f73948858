// Internal. CPU kernels for joining and indexing. Front ends validate shapes and index ranges
// and allocate outputs; these only move and add elements. Index tensors are int64.
#pragma once

#include <optional>

#include "nabla/core/tensor.h"

namespace nabla::ops::cpu {

// The first value of `index` outside [0, bound), if any (checked before any kernel writes).
std::optional<int64_t> find_out_of_range(const Tensor& index, int64_t bound);

// out.select(dim, i) = x.select(dim, index[i]); index is 1-d.
void index_select(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& out);
// out.select(dim, index[i]) += source.select(dim, i), repeats accumulating; index is 1-d.
void index_add_(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& source);
// out.select(dim, index[i]) = source.select(dim, i); of repeated entries the last one's slice stays.
void index_copy_(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& source);
// out[p] = x[p with coordinate `dim` replaced by index[p]], over every position p of index.
void gather(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& out);
// out[p with coordinate `dim` replaced by index[p]] += src[p], over every position p of index.
void scatter_add_(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src);

}  // namespace nabla::ops::cpu
