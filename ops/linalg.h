// Public header. Matrix products (Eigen GEMM on the CPU; cuBLAS on CUDA).
//
//   matmul: numpy semantics. 1-d x 1-d is a dot product; 2-d x 2-d a matrix product; batched
//           operands broadcast over their leading dims ((B, N, K) @ (K, M) -> (B, N, M)).
//   bmm:    (B, N, K) @ (B, K, M) -> (B, N, M), no broadcasting.
//   linear: x @ weight^T + bias, with x (..., in), weight (out, in), bias (out) or undefined.
// Float16/bfloat16 operands compute in float32 on the CPU; on CUDA they stay 16-bit and
// accumulate in float32 (cuBLASLt).
//
// TF32: on CUDA, float32 products may use TensorFloat-32 tensor cores (10-bit mantissa inputs,
// float32 accumulation), much faster and less precise. Off by default, as in PyTorch; on with
//   nabla::RoutesGuard g({.matmul_tf32 = true});   // ops/routes.h; matmul, mm, bmm and linear
#pragma once

#include "nabla/core/tensor.h"

namespace nabla {

Tensor matmul(const Tensor& a, const Tensor& b);
Tensor mm(const Tensor& a, const Tensor& b);  // 2-d only
Tensor bmm(const Tensor& a, const Tensor& b);
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = {});
// linear followed by an activation, with the values of act(linear(x, weight, bias)). On CUDA in
// float16/bfloat16 the activation runs in cuBLASLt's epilogue (the GELU_AUX epilogues keep the
// pre-activation for the backward), so the product is written once, activated; elsewhere, and
// where cuBLASLt offers no such algorithm, it is the composition. The epilogue applies the
// activation to the float32 sum before rounding, where the composition rounds first: results
// may differ in the last bit of the 16-bit output.
enum class Activation { none, gelu_tanh };
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias, Activation activation);

}  // namespace nabla
