// Internal. CUDA entry points of fused (flash-style) attention, in plain C++ so the front end
// (ops/attention.cpp) compiles without nvcc. Everything runs on the current stream of q's device,
// never synchronizes the host, and takes scratch memory only from the caching allocator.
//
// Shapes (every tensor on one CUDA device):
//   q (B, H, Tq, D), k (B, H, Tk, D), v (B, H, Tk, D): float16 or bfloat16, one dtype, any strides
//     whose last dim is 1 (the front end makes them so);
//   out (B, H, Tq, D) of q's dtype, contiguous; lse (B, H, Tq) float32, contiguous: the log of
//     each row's softmax denominator, in the scaled-score domain (scores * scale + mask);
//   mask: undefined, or a float32 additive mask given as a 4-d tensor with sizes (B|1, H|1, Tq, Tk)
//     and any strides (a broadcast dim has stride 0); -inf hides a key.
// causal hides key j from query i when j > i (top-left aligned).
#pragma once

#include "nabla/core/tensor.h"

namespace nabla::ops::cuda {

// True when the fused kernels take these inputs: float16/bfloat16, D == Dv, D a multiple of 8 and
// at most 128, q/k/v on one CUDA device with one dtype.
bool flash_attention_supported(const Tensor& q, const Tensor& k, const Tensor& v);

void flash_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                             bool causal, double scale, const Tensor& out, const Tensor& lse);

// dq, dk, dv have the shapes of q, k, v, q's dtype, and are contiguous; every one is written.
void flash_attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                              const Tensor& out, const Tensor& lse, const Tensor& mask, bool causal,
                              double scale, const Tensor& dq, const Tensor& dk, const Tensor& dv);

}  // namespace nabla::ops::cuda
