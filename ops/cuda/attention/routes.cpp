// The CUDA fused-attention family's route table and its backend (ops/detail/attention.h).
//
// Every route a fused attention can take is chosen here, by attention_route, for the forward and
// the backward alike (each chooses on its own; both write and read the same lse):
//
//   backend flash, or a mask       -> Flash (nabla's kernels, attention/flash_*.cu)
//   otherwise                      -> Cudnn (cuDNN's fused attention, attention/cudnn.cpp),
//                                     which falls back to Flash where cuDNN does not take the
//                                     problem, unless the user asked for cudnn: then an error
//                                     names cuDNN's reason.
//
// cuDNN's graph here takes no mask; where it runs, it was measured faster than the flash
// kernels (docs/design/attention.md), so it goes first.
#include <array>
#include <string>

#include "nabla/ops/cuda/attention/kernels.h"

namespace nabla::ops::cuda {

namespace {

constexpr const char* kOp = "scaled_dot_product_attention";
constexpr std::array kRoutes = {AttentionRoute::Cudnn, AttentionRoute::Flash};

bool takes(const Tensor& q, const Tensor& k, const Tensor& v) {
  return flash_attention_supported(q, k, v);
}

void forward(const AttentionCall& c, const Tensor& out, const Tensor& lse) {
  std::string why = "cuDNN's fused attention here takes no mask";
  if (attention_route(c) == AttentionRoute::Cudnn &&
      cudnn_attention_forward(c.q, c.k, c.v, c.causal, c.scale, out, lse, &why))
    return;
  NABLA_CHECK(c.backend != AttentionBackend::cudnn, "{}: backend cudnn cannot take these inputs: {}", kOp,
              why);
  flash_attention_forward(c.q, c.k, c.v, c.mask, c.causal, c.scale, out, lse);
}

void backward(const AttentionCall& c, const Tensor& dout, const Tensor& out, const Tensor& lse,
              bool deterministic, const Tensor& dq, const Tensor& dk, const Tensor& dv) {
  std::string why = "cuDNN's fused attention here takes no mask";
  if (attention_route(c) == AttentionRoute::Cudnn &&
      cudnn_attention_backward(dout, c.q, c.k, c.v, out, lse, c.causal, c.scale, deterministic, dq, dk, dv,
                               &why))
    return;
  NABLA_CHECK(c.backend != AttentionBackend::cudnn, "{}: backend cudnn cannot take these inputs: {}", kOp,
              why);
  flash_attention_backward(dout, c.q, c.k, c.v, out, lse, c.mask, c.causal, c.scale, dq, dk, dv);
}

}  // namespace

std::span<const AttentionRoute> attention_routes() {
  return kRoutes;
}

const char* route_name(AttentionRoute route) {
  return route == AttentionRoute::Cudnn ? "cuDNN" : "flash";
}

AttentionRoute attention_route(const AttentionCall& call) {
  if (call.backend == AttentionBackend::flash || call.mask.defined()) return AttentionRoute::Flash;
  return AttentionRoute::Cudnn;
}

const FusedAttention kFusedAttention{.takes = takes, .forward = forward, .backward = backward};

}  // namespace nabla::ops::cuda
