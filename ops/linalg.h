// Public header. Matrix products (Eigen GEMM on the CPU; cuBLAS on CUDA).
//
//   matmul: numpy semantics. 1-d x 1-d is a dot product; 2-d x 2-d a matrix product; batched
//           operands broadcast over their leading dims ((B, N, K) @ (K, M) -> (B, N, M)).
//   bmm:    (B, N, K) @ (B, K, M) -> (B, N, M), no broadcasting.
//   linear: x @ weight^T + bias, with x (..., in), weight (out, in), bias (out) or undefined.
// Float16/bfloat16 operands compute in float32 on the CPU.
#pragma once

#include "nabla/core/tensor.h"

namespace nabla {

Tensor matmul(const Tensor& a, const Tensor& b);
Tensor mm(const Tensor& a, const Tensor& b);  // 2-d only
Tensor bmm(const Tensor& a, const Tensor& b);
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = {});

}  // namespace nabla
