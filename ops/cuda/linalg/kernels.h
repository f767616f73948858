// Internal. CUDA matrix products on cuBLASLt, in plain C++ so front ends compile without nvcc.
// The front end validates shapes and dtypes, broadcasts the batch dims and allocates the output.
#pragma once

#include "nabla/core/tensor.h"

namespace nabla::ops::cuda {

// True when the last two dims of `t` are a row- or column-major matrix cuBLASLt can read in
// place (a plain or transposed view); otherwise the caller makes it contiguous.
bool is_gemm_operand(const Tensor& t);

struct GemmOptions {
  Tensor bias = {};         // (M) added to every row of the output, or undefined
  bool allow_tf32 = false;  // float32 only: CUBLAS_COMPUTE_32F_FAST_TF32 instead of CUBLAS_COMPUTE_32F
  // 2-d products without a bias only, at most one of the two: (N) sums over K of a's rows, or
  // (M) sums over K of b's columns, written by the product's epilogue (a linear layer's bias
  // gradient, with no pass of its own over the output gradient). Contiguous, out's dtype.
  Tensor a_row_sums = {};
  Tensor b_column_sums = {};
  // 2-d products only: out = gelu_tanh(product [+ bias]) from the epilogue (cuBLASLt's GELU is the
  // tanh approximation). gelu_input, when defined (out's shape, dtype and contiguity), receives
  // the pre-activation product [+ bias] for the backward (the GELU_AUX epilogues). Float16 and
  // bfloat16 only. When cuBLASLt has no algorithm with that epilogue nothing is written and gemm
  // returns false: the caller composes.
  bool gelu = false;
  Tensor gelu_input = {};
  // out += the product (cuBLASLt's beta = 1): out's contents are added in the epilogue, not by
  // a pass of their own (a gradient accumulated into the sum so far). No bias, sums or GELU.
  bool accumulate = false;
  // 2-d products only: out = relu(product [+ bias] [+ addend]) (relu), or product [+ bias] +
  // addend, in the epilogue: an inference convolution with its batch norm folded in, its ReLU
  // and its residual block's sum in one pass. addend (out's shape, dtype and contiguity) is
  // cuBLASLt's C with beta = 1. When cuBLASLt has no algorithm with that epilogue nothing is
  // written and gemm returns false: the caller composes. No sums, GELU or accumulate.
  bool relu = false;
  Tensor addend = {};
};

// out (..., N, M) = a (..., N, K) @ b (..., K, M) [+ bias]. a, b and out share the batch sizes
// (a and b may be expanded, stride 0) and one floating dtype; a and b pass is_gemm_operand; out
// is contiguous. float16/bfloat16 accumulate in float32, float64 in float64. Returns false when
// sums were asked for and cuBLASLt has no algorithm that writes them: the product is then
// written and the sums are not; and when a GELU, ReLU or addend epilogue was asked for and
// cuBLASLt has none (then nothing is written).
bool gemm(const Tensor& a, const Tensor& b, const Tensor& out, const GemmOptions& options = {});

}  // namespace nabla::ops::cuda
