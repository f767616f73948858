// Internal. The fused-attention family's backend seam (Note [Backend seams] in
// docs/design/routes.md): what a backend's fused attention computes, declared once for every
// backend. The front end (ops/attention.cpp) validates, lays out the output and gradient buffers
// and records one autograd node; which implementation runs is the backend's choice (the CUDA
// route table is ops/cuda/attention/routes.cpp). The CPU has no fused attention: its backend
// takes nothing, and the front end composes the math path.
//
// Layouts (ops/cuda/attention/kernels.h has the details): q (B, H, Tq, D), k (B, Hkv, Tk, D),
// v (B, Hkv, Tk, D) (Hkv dividing H: grouped-query attention) of one 16-bit dtype with unit last stride; out
// (B, H, Tq, D) of any such strides; lse (B, H, Tq) float32, each row's log-sum-exp of the scaled, masked
// scores, which the backward needs and which every route writes alike (so any backward can follow any
// forward).
#pragma once

#include <string>

#include <utility>

#include "nabla/core/tensor.h"
#include "nabla/ops/attention.h"
#include "nabla/ops/detail/dispatch.h"

namespace nabla::ops {

// One fused attention problem.
struct AttentionCall {
  Tensor q, k, v;
  Tensor mask;  // undefined, or float32 additive, viewed as (B, H, Tq, Tk) (stride 0 where broadcast)
  bool causal = false;
  double scale = 1.0;
  AttentionBackend backend = AttentionBackend::automatic;  // the user's wish: automatic, cudnn or flash
};

struct FusedAttention {
  // Whether the fused routes take q, k and v at all (device, dtype, head size).
  bool (*takes)(const Tensor& q, const Tensor& k, const Tensor& v);
  // Writes out and lse. Throws a clear error when the route the user asked for cannot take it.
  void (*forward)(const AttentionCall& call, const Tensor& out, const Tensor& lse);
  // Writes every element of dq, dk and dv (shaped as q, k, v; unit last stride) from the
  // forward's out and lse. `deterministic`: the forward's Routes::cudnn_deterministic.
  void (*backward)(const AttentionCall& call, const Tensor& dout, const Tensor& out, const Tensor& lse,
                   bool deterministic, const Tensor& dq, const Tensor& dk, const Tensor& dv);
};

namespace cpu {
extern const FusedAttention kFusedAttention;  // ops/cpu/attention.cpp
}
namespace cuda {
extern const FusedAttention kFusedAttention;  // ops/cuda/attention/routes.cpp (CUDA builds only)
}

// Runs call(backend) with the fused attention of `on`'s device, timed as `op`: the family's one
// dispatch (Note [One backend dispatch] in core/dispatch.h).
template <class Call>
decltype(auto) on_fused_attention(const char* op, const Tensor& on, Call&& call) {
  return on_backend<cpu::kFusedAttention, cuda::kFusedAttention>(op, on, std::forward<Call>(call));
}

}  // namespace nabla::ops
