// Gradient clipping: per-tensor norms combined on the device, one scale per gradient.
#include "nabla/optim/clip.h"

#include <cmath>
#include <unordered_set>

#include "nabla/core/autograd/grad_mode.h"
#include "nabla/core/error.h"
#include "nabla/ops/elementwise.h"
#include "nabla/ops/factory.h"
#include "nabla/ops/reduce.h"
#include "nabla/optim/multi_tensor.h"

namespace nabla::optim {

Tensor clip_grad_norm_(const TensorList& params, double max_norm, double norm_type) {
  NABLA_CHECK(max_norm >= 0.0, "clip_grad_norm_: max_norm must be >= 0, got {}", max_norm);
  NABLA_CHECK(norm_type > 0.0, "clip_grad_norm_: norm_type must be > 0 (or kInfNorm), got {}", norm_type);
  NoGradGuard no_grad;
  TensorList grads;
  for (const auto& p : params) {
    if (p.grad().defined()) grads.push_back(p.grad());
  }
  if (grads.empty()) return zeros({}, {.dtype = kFloat32});
  const Device device = grads[0].device();
  for (const auto& g : grads) {
    NABLA_CHECK(g.device() == device, "clip_grad_norm_: all gradients must be on one device, got {} and {}",
                device.str(), g.device().str());
  }
  const bool inf = std::isinf(norm_type);
  // Accumulate in float32 at least (float64 gradients keep float64).
  const DType acc = grads[0].dtype() == kFloat64 ? kFloat64 : kFloat32;
  Tensor total;
  TensorList fused;  // float32 CUDA gradients for the L2 norm: one multi-tensor reduction
  if (norm_type == 2.0 && acc == kFloat32) {
    TensorList rest;
    for (const auto& g : grads) {
      const bool dense = g.is_contiguous() || g.is_contiguous(MemoryFormat::ChannelsLast);
      (g.is_cuda() && g.dtype() == kFloat32 && dense ? fused : rest).push_back(g);
    }
    if (!fused.empty()) {
      total = dispatch(
          "clip_grad_norm_", fused.front(), [] { return Tensor(); },  // only CUDA gradients are fused
          [&] { return cuda::multi_tensor_sum_of_squares(fused); });
      grads = std::move(rest);
    }
  }
  for (const auto& g : grads) {
    Tensor gv = g.dtype() == acc ? g : g.to(acc);
    Tensor part = inf ? max(abs(gv)) : sum(pow(abs(gv), norm_type));
    total = total.defined() ? (inf ? maximum(total, part) : add(total, part)) : part;
  }
  if (!inf) total = pow(total, 1.0 / norm_type);
  // coefficient = min(1, max_norm / (total + 1e-6)), applied as a device tensor.
  Tensor coef =
      clamp(div(full({}, max_norm, {.dtype = acc, .device = device}), add(total, 1e-6)), std::nullopt, 1.0);
  // Each distinct gradient is scaled once (a parameter listed twice shares one), the float32 CUDA
  // ones whose norm was fused in one launch per batch, so no two blocks write one tensor.
  std::unordered_set<const void*> seen;
  TensorList fused_once;
  for (const Tensor& g : fused) {
    if (seen.insert(g.impl_ptr().get()).second) fused_once.push_back(g);
  }
  if (!fused_once.empty()) {
    dispatch(
        "clip_grad_norm_", fused_once.front(), [] {}, [&] { cuda::multi_tensor_scale_(fused_once, coef); });
  }
  for (const auto& p : params) {
    if (!p.grad().defined()) continue;
    Tensor param = p;  // a handle; the gradient it reaches is the shared one
    Tensor& g = param.mutable_grad();
    if (!seen.insert(g.impl_ptr().get()).second) continue;  // fused, or scaled already
    g.mul_(g.dtype() == acc ? coef : coef.to(g.dtype()));
  }
  return total;
}

void clip_grad_value_(const TensorList& params, double clip_value) {
  NABLA_CHECK(clip_value >= 0.0, "clip_grad_value_: clip_value must be >= 0, got {}", clip_value);
  NoGradGuard no_grad;
  for (const auto& p : params) {
    if (!p.grad().defined()) continue;
    Tensor param = p;
    param.mutable_grad().clamp_(-clip_value, clip_value);
  }
}

}  // namespace nabla::optim
