// Internal. CUDA entry points of fused attention (nabla's flash kernels and cuDNN's), in plain C++
// so tests compile without nvcc. Everything runs on the current stream of q's device,
// never synchronizes the host, and takes scratch memory only from the caching allocator.
//
// Shapes (every tensor on one CUDA device):
//   q (B, H, Tq, D), k (B, Hkv, Tk, D), v (B, Hkv, Tk, D): float16 or bfloat16, one dtype, any
//     strides whose last dim is 1 (the front end makes them so); Hkv divides H (grouped-query
//     attention: query head h reads key/value head h / (H / Hkv); Hkv = H without);
//   out (B, H, Tq, D) of q's dtype, any strides whose last dim is 1 (say the transpose(1, 2) view
//     of a (B, Tq, H, D) tensor); lse (B, H, Tq) float32, contiguous: the log of each row's softmax
//     denominator, in the scaled-score domain (scores * scale + mask);
//   mask: undefined, or a float32 additive mask given as a 4-d tensor with sizes (B|1, H|1, Tq, Tk)
//     and any strides (a broadcast dim has stride 0); -inf hides a key.
// causal hides key j from query i when j > i (top-left aligned).
// Outputs (out, dq, dk, dv) must not overlap each other or the inputs, and distinct elements of
// one output must be distinct memory (no stride 0 on a dim longer than 1). An input or output
// moves in 16-byte pieces when its data pointer is 16-byte aligned and its batch, head and row
// strides are multiples of 8 elements (vector_ok in attention/tile.cuh; contiguous tensors and
// views of a (B, T, 3, H, D) or (B, T, 3C) buffer qualify); otherwise element by element.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "nabla/core/tensor.h"
#include "nabla/ops/detail/attention.h"

namespace nabla::ops::cuda {

// The routes of a fused attention (route table: attention/routes.cpp). The front end reaches them
// through the seam (ops/detail/attention.h); tests enumerate them.
enum class AttentionRoute : uint8_t { Cudnn, Flash };
std::span<const AttentionRoute> attention_routes();
const char* route_name(AttentionRoute route);
// The route a call prefers (Cudnn still falls back to Flash where cuDNN declines the problem).
AttentionRoute attention_route(const AttentionCall& call);

// True when the fused kernels take these inputs: float16/bfloat16, D == Dv, D a multiple of 8 and
// at most 128, q/k/v on one CUDA device with one dtype, k's and v's heads dividing q's.
bool flash_attention_supported(const Tensor& q, const Tensor& k, const Tensor& v);

void flash_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                             bool causal, double scale, const Tensor& out, const Tensor& lse);

// dout and out (the forward's) are read at any strides. dq, dk, dv have the shapes of q, k, v (dk
// and dv summed over each key/value head's group of query heads) and
// q's dtype, any strides whose last dim is 1 (say views of one (B, T, 3, H, D) gradient buffer);
// every element is written. dq is accumulated in a contiguous float32 scratch buffer first.
void flash_attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                              const Tensor& out, const Tensor& lse, const Tensor& mask, bool causal,
                              double scale, const Tensor& dq, const Tensor& dk, const Tensor& dv);

// cuDNN's fused attention (attention/cudnn.cpp), for the same shapes and layouts without a mask:
// builds (once per problem, then cached) a backend graph and runs it. Returns false, with the
// reason in `why` when given, where cuDNN does not take the problem (an unsupported head size,
// layout or alignment, or no engine from its heuristics); nothing has been written then. lse is
// the same as the flash kernels', so either backward can follow either forward. A deterministic
// backward (Routes::cudnn_deterministic) sums dq in a fixed order.
bool cudnn_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, double scale,
                             const Tensor& out, const Tensor& lse, std::string* why = nullptr);
bool cudnn_attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                              const Tensor& out, const Tensor& lse, bool causal, double scale,
                              bool deterministic, const Tensor& dq, const Tensor& dk, const Tensor& dv,
                              std::string* why = nullptr);

}  // namespace nabla::ops::cuda
