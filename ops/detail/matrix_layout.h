// Internal (ops backends). How a 2-d matrix (the last two dims of a tensor) sits in memory, as a
// GEMM sees it: row-major or column-major with a leading dimension, or neither (then the caller
// makes it contiguous). Shared by the CPU (Eigen) and CUDA (cuBLASLt) GEMMs.
#pragma once

#include <algorithm>
#include <cstdint>

#include "nabla/core/tensor.h"

namespace nabla::ops {

struct MatrixLayout {
  bool ok = false;
  bool row_major = true;
  int64_t ld = 1;  // elements between rows (row-major) or between columns (column-major)
};

// A dim of size 1 may have any stride, so it never decides the layout.
inline MatrixLayout layout_of(int64_t rows, int64_t cols, int64_t row_stride, int64_t col_stride) {
  const int64_t r = std::max<int64_t>(rows, 1), c = std::max<int64_t>(cols, 1);
  if ((cols == 1 || col_stride == 1) && (rows == 1 || row_stride >= c)) {
    return {.ok = true, .row_major = true, .ld = rows == 1 ? c : row_stride};
  }
  if ((rows == 1 || row_stride == 1) && (cols == 1 || col_stride >= r)) {
    return {.ok = true, .row_major = false, .ld = cols == 1 ? r : col_stride};
  }
  return {};
}

inline MatrixLayout layout_of(const Tensor& t) {
  const int64_t n = t.dim();
  return layout_of(t.size(n - 2), t.size(n - 1), t.stride(n - 2), t.stride(n - 1));
}

}  // namespace nabla::ops
