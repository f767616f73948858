// Internal. CUDA matrix products on cuBLASLt, in plain C++ so front ends compile without nvcc.
// The front end validates shapes and dtypes, broadcasts the batch dims and allocates the output.
#pragma once

#include "nabla/core/tensor.h"

namespace nabla::ops::cuda {

// True when the last two dims of `t` are a row- or column-major matrix cuBLASLt can read in
// place (a plain or transposed view); otherwise the caller makes it contiguous.
bool is_gemm_operand(const Tensor& t);

struct GemmOptions {
  Tensor bias;              // (M) added to every row of the output, or undefined
  bool allow_tf32 = false;  // float32 only: CUBLAS_COMPUTE_32F_FAST_TF32 instead of CUBLAS_COMPUTE_32F
};

// out (..., N, M) = a (..., N, K) @ b (..., K, M) [+ bias]. a, b and out share the batch sizes
// (a and b may be expanded, stride 0) and one floating dtype; a and b pass is_gemm_operand; out
// is contiguous. float16/bfloat16 accumulate in float32, float64 in float64.
void gemm(const Tensor& a, const Tensor& b, const Tensor& out, const GemmOptions& options = {});

}  // namespace nabla::ops::cuda
