// The CPU backend of the fused-attention seam (ops/detail/attention.h): the CPU has no fused
// attention, so it takes nothing and the front end runs the math path.
#include "nabla/ops/detail/attention.h"

namespace nabla::ops::cpu {

namespace {

void no_fused_attention() {
  NABLA_ASSERT(false, "scaled_dot_product_attention: the CPU has no fused attention (takes() is false)");
}

}  // namespace

const FusedAttention kFusedAttention{
    .takes = [](const Tensor&, const Tensor&, const Tensor&) { return false; },
    .forward = [](const AttentionCall&, const Tensor&, const Tensor&) { no_fused_attention(); },
    .backward = [](const AttentionCall&, const Tensor&, const Tensor&, const Tensor&, bool, const Tensor&,
                   const Tensor&, const Tensor&) { no_fused_attention(); }};

}  // namespace nabla::ops::cpu
