// Internal. CPU matrix-product kernels (Eigen). Front ends validate shapes and dtypes, broadcast
// the batch dims and allocate the output; these only compute.
#pragma once

#include "nabla/core/tensor.h"

namespace nabla::ops::cpu {

// True when the last two dims of `t` map onto a row- or column-major matrix with a leading
// dimension Eigen accepts (a plain or transposed view); otherwise the caller makes it contiguous.
bool is_gemm_operand(const Tensor& t);

// out (..., N, M) = a (..., N, K) @ b (..., K, M), or += when `accumulate`. a, b and out have the
// same batch sizes (a and b may be expanded, stride 0); a and b pass is_gemm_operand; out is
// contiguous. float32 or float64 only: the front end computes float16/bfloat16 in float32.
void gemm(const Tensor& a, const Tensor& b, const Tensor& out, bool accumulate);

}  // namespace nabla::ops::cpu
