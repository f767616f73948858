// Public header. Joining, splitting and indexing.
//
//   cat({a, b}, 1)         // (N, A) and (N, B) -> (N, A + B)
//   stack({a, b}, 0)       // two (N, M) -> (2, N, M)
//   split(x, 2, 0)         // pieces of 2 rows (the last may be shorter), views of x
//   chunk(x, 3, 0)         // 3 pieces (fewer when the dim is short), views of x
//   index_select(x, 0, i)  // rows i[0], i[1], ... of x; i is a 1-d int64 tensor
//   gather(x, 1, i)        // out[n][k] = x[n][i[n][k]]; i has x's rank
//   index_copy_(cache, 2, pos, k)   // cache.select(2, pos[j]) = k.select(2, j): a write at
//                                   // positions held on the device (a CUDA graph can replay it)
#pragma once

#include <vector>

#include "nabla/core/tensor.h"

namespace nabla {

Tensor cat(const TensorList& tensors, int64_t dim = 0);
Tensor stack(const TensorList& tensors, int64_t dim = 0);
TensorList split(const Tensor& x, int64_t split_size, int64_t dim = 0);
TensorList split_with_sizes(const Tensor& x, const Shape& sizes, int64_t dim = 0);
TensorList chunk(const Tensor& x, int64_t chunks, int64_t dim = 0);

Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index);
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index);
// x with source's slices added at `index` along dim (out of place; repeats accumulate).
Tensor index_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& source);
// x with source's slices written at `index` along dim: out.select(dim, index[i]) =
// source.select(dim, i), source being x's shape with dim sized by the index. Of repeated indices
// one slice stays (the last on the CPU; unspecified on CUDA), and source's gradient is then
// undefined (each repeat gets the slot's, as in PyTorch). Differentiable in x and source.
Tensor index_copy(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& source);
// The same, into x in place (no copy of x; recorded as index_copy when autograd needs it).
Tensor& index_copy_(Tensor& x, int64_t dim, const Tensor& index, const Tensor& source);
// x with src added at positions `index` along dim (out of place; repeats accumulate).
Tensor scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src);

}  // namespace nabla
