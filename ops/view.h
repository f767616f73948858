// Public header. Views: new sizes, strides and offset over the same storage, with autograd.
// Each is also a Tensor method (x.view(...), x.permute(...)). reshape() and contiguous() copy
// only when the strides leave no other way.
#pragma once

#include <optional>

#include "nabla/core/tensor.h"

namespace nabla {

Tensor view(const Tensor& x, const Shape& sizes);  // one size may be -1 (inferred)
Tensor reshape(const Tensor& x, const Shape& sizes);
Tensor permute(const Tensor& x, const Shape& dims);
Tensor transpose(const Tensor& x, int64_t dim0, int64_t dim1);
Tensor narrow(const Tensor& x, int64_t dim, int64_t start, int64_t length);
// Elements start, start + step, ... below end; negative start/end count from the back and are
// clamped to the dim, as in Python slicing. step must be positive.
Tensor slice(const Tensor& x, int64_t dim, int64_t start, int64_t end, int64_t step = 1);
Tensor select(const Tensor& x, int64_t dim, int64_t index);
Tensor expand(const Tensor& x, const Shape& sizes);  // -1 keeps a dim; new dims go in front
Tensor squeeze(const Tensor& x);
Tensor squeeze(const Tensor& x, int64_t dim);
Tensor unsqueeze(const Tensor& x, int64_t dim);
Tensor flatten(const Tensor& x, int64_t start_dim = 0, int64_t end_dim = -1);
Tensor contiguous(const Tensor& x, MemoryFormat format = MemoryFormat::Contiguous);
Tensor as_strided(const Tensor& x, const Shape& sizes, const Shape& strides,
                  std::optional<int64_t> offset = std::nullopt);

namespace ops {
// Internal (contiguous()). A view of x, which must already be dense in `format`, with exactly
// that format's strides: for a tensor that is both NCHW and NHWC (one channel, or 1x1 pixels)
// only the strides of its size-1 dims change, which address nothing, so no data moves. Convs
// read those strides to keep such a tensor channels_last (ops/conv.cpp).
Tensor with_format_strides(const Tensor& x, MemoryFormat format);
}  // namespace ops

}  // namespace nabla
