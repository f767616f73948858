// Internal. The convolution + batch-norm path's backend seam (Note [Backend seams] in
// docs/design/routes.md; the path: Note [Convolution + batch norm fusion] in
// ops/cuda/conv/bn_fused.cpp). The front ends (ops/conv_bn.cpp) validate, allocate the outputs
// and record autograd; the backend runs each fused step or its unfused equivalent. Only CUDA has
// the path: the front ends take it for CUDA tensors only (channels_last float16), and compose
// the plain ops everywhere else.
//
// Tensors: x, y, z and their gradients channels_last of one 16-bit dtype; per-channel tensors (C)
// float32, except the folded scale and shift (y's dtype: the next convolution's prologue).
#pragma once

#include <type_traits>
#include <vector>

#include "nabla/core/dispatch.h"
#include "nabla/core/tensor.h"
#include "nabla/ops/detail/batch_norm.h"
#include "nabla/ops/detail/conv.h"

namespace nabla::ops {

// What z = conv(relu(bn(y)), w) keeps for its backward: y, the batch norm's weight (gamma) and
// bias (beta), the convolution's weight, the batch statistics, and the batch norm folded into
// relu(y * scale + shift).
struct BnReluConvSaved {
  Tensor y, gamma, beta, w, mean, invstd, scale, shift;
};

// The gradients of z = conv(relu(bn(y)), w): dy, dgamma, dbeta, dw (each undefined where not asked).
struct BnReluConvGrads {
  Tensor dy, dgamma, dbeta, dw;
};

struct ConvBatchNorm {
  // y = conv(x, w), and sum / sqsum = the per-channel sums of y and y^2. False, having written
  // nothing, where no fused engine takes it.
  bool (*conv_sums)(const Tensor& x, const Tensor& w, const Tensor& y, const Tensor& sum, const Tensor& sqsum,
                    const ConvParams& p, const Routes& routes);
  // z = conv(relu(bn(y)), s.w) from y's sums (count values per channel): writes s.mean, s.invstd,
  // s.scale, s.shift and the running stats (when defined; their versions bumped), and z, and z's sums into
  // z_sum and z_sqsum where the fused engine runs. Returns whether it did. Without want_sums a route that
  // writes no sums may be taken where it is faster.
  bool (*bn_relu_conv_forward)(const Tensor& sum, const Tensor& sqsum, int64_t count,
                               const BnReluConvSaved& s, const Tensor& running_mean,
                               const Tensor& running_var, double momentum, double eps, const Tensor& z,
                               const Tensor& z_sum, const Tensor& z_sqsum, bool want_sums,
                               const ConvParams& p, const Routes& routes);
  // The gradients of z = conv(relu(bn(y)), w) from dz (channels_last); needs: dy, dgamma, dbeta, dw.
  BnReluConvGrads (*bn_relu_conv_backward)(const Tensor& dz, const BnReluConvSaved& s,
                                           const std::vector<bool>& needs, const ConvParams& p,
                                           const Routes& routes);
  // out = bn(y) [+ residual] [relu'd] from y's sums: writes stats and the running stats (when
  // defined); weight and bias defined.
  void (*bn_from_sums)(const Tensor& sum, const Tensor& sqsum, const BatchNormInputs& in,
                       const BatchNormStats& stats, double momentum, double eps, const Tensor& residual,
                       bool relu, const Tensor& out);
};

namespace cuda {
extern const ConvBatchNorm kConvBatchNorm;  // ops/cuda/conv/bn_path.cpp (CUDA builds only)
}

// Runs call(backend) with the path's CUDA backend, timed as `op`; a CPU tensor here is a bug in
// the front end, which composes the plain ops on the CPU.
template <class Call>
decltype(auto) on_conv_batch_norm(const char* op, const Tensor& on, Call&& call) {
  return nabla::dispatch(
      op, on,
      [&] {
        NABLA_ASSERT(false, "{}: the convolution + batch-norm path is CUDA only", op);
        return std::invoke_result_t<Call&, const ConvBatchNorm&>();
      },
      [&] { return call(cuda::kConvBatchNorm); });
}

}  // namespace nabla::ops
