// Internal (ops and its backends). alias(): a tensor over `base`'s storage with new geometry and
// no autograd history. Views build on it (ops/view.cpp records their history), as do backends
// that reinterpret an output buffer. It does no bounds checking: callers compute geometry that
// stays inside the storage. Users get the checked, differentiable version as Tensor::as_strided.
#pragma once

#include <memory>

#include "nabla/core/tensor.h"

namespace nabla::ops {

inline Tensor alias(const Tensor& base, const Shape& sizes, const Shape& strides, int64_t offset) {
  return Tensor(std::make_shared<TensorImpl>(base.storage(), offset, sizes, strides, base.dtype()));
}

// The slice [start, start + length) of `dim` of t, as an alias: a piece's slot in a cat's output.
inline Tensor narrow_alias(const Tensor& t, int64_t dim, int64_t start, int64_t length) {
  Shape sizes = t.sizes();
  sizes[static_cast<size_t>(dim)] = length;
  return alias(t, sizes, t.strides(), t.storage_offset() + start * t.stride(dim));
}

// The elements a layout reaches from its first, 1 + sum (size - 1) * stride (0 when empty): the
// buffer it needs. A dense layout's is its numel; a slice's, with its parent's strides, more.
inline int64_t layout_extent(const Shape& sizes, const Shape& strides) {
  int64_t extent = 1;
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] == 0) return 0;
    extent += (sizes[d] - 1) * strides[d];
  }
  return extent;
}

// Note [Gradients in their input's layout]: a gradient laid out as its input is (PyTorch's
// empty_like with preserve_format) reaches the views the input came from as views again, where a
// contiguous one would be copied: attention's dq, dk and dv going back through the heads'
// transpose and the projection's reshape, the zeros a slice's backward writes into. `like`'s
// strides when they are non-overlapping and dense (a permutation of a contiguous layout), else
// contiguous ones.
inline Shape dense_strides_like(const Shape& sizes, const Shape& strides) {
  return is_non_overlapping_and_dense(sizes, strides) ? strides : contiguous_strides(sizes);
}
inline Shape dense_strides_like(const Tensor& like) {
  return dense_strides_like(like.sizes(), like.strides());
}

// A fresh tensor of `sizes` laid out with `strides`, which must be dense (a permutation of a
// contiguous layout, as dense_strides_like gives): one buffer of numel elements seen through them.
inline Tensor empty_strided(const Shape& sizes, const Shape& strides, const TensorOptions& options) {
  return alias(Tensor::empty({numel_of(sizes)}, options), sizes, strides, 0);
}

}  // namespace nabla::ops
