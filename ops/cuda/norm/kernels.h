// Internal. CUDA entry points for batch norm and layer norm, in plain C++ so front ends compile
// without nvcc. Same tensor contracts as ops/cpu/norm_kernels.h. Everything runs on the current
// stream of x's device and never synchronizes.
//
// A training-mode batch norm forward runs on cuDNN for channels_last float64 input where cuDNN
// supports the call, and on nabla's own kernels otherwise (Note [cuDNN batch norm] in
// batch_norm/cudnn.cpp). It reports which, and its backward must be given that report back,
// because cuDNN's backward needs the reserve space the forward filled.
#pragma once

#include <cstdint>
#include <optional>

#include "nabla/core/tensor.h"
#include "nabla/ops/cpu/norm_kernels.h"

namespace nabla::ops::cuda {

using BatchNormInputs = cpu::BatchNormInputs;
using BatchNormStats = cpu::BatchNormStats;

enum class BatchNormImpl : uint8_t {
  Kernel,  // nabla's kernels (batch_norm/batch_norm.cu)
  // nabla's forward kernel ran relu(bn(x)) (no residual): the backward recomputes the ReLU's
  // mask from x (Note [The ReLU's mask from x] in batch_norm/batch_norm.cu) instead of reading y.
  KernelReluFromX,
  CudnnEx,  // cuDNN's Ex API in SPATIAL mode (channels_last float64)
};

inline bool on_kernels(BatchNormImpl impl) {
  return impl != BatchNormImpl::CudnnEx;
}

struct BatchNormForward {
  BatchNormImpl impl = BatchNormImpl::Kernel;
  Tensor reserve;  // uint8 cuDNN reserve space (CudnnEx only)
};

// Gradients of batch norm. The backward entry points write every defined one; the CUDA
// training backward writes all of dx, dweight and dbias (cuDNN always computes all three).
struct BatchNormGrads {
  Tensor dx, dresidual, dweight, dbias;
};

BatchNormForward batch_norm_forward(const BatchNormInputs& in, const Tensor& y, const BatchNormStats& stats,
                                    double momentum, double eps);
void batch_norm_inference(const BatchNormInputs& in, const Tensor& y, double eps);
void batch_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const BatchNormStats& stats,
                         const BatchNormForward& forward, double eps, const BatchNormGrads& grads);

// nabla's own kernels, used for the calls that do not go to cuDNN (also by batch_norm_backward for
// forwards that ran on them). Same contracts as the CPU kernels, plus the fused variants: the
// forward adds z (defined: x's shape and layout) and/or applies a ReLU; the backward takes that
// ReLU's output y as relu_y (the gradient is masked where y <= 0) and writes the masked gradient
// to grads.dresidual when that is defined. Or, for relu(bn(x)) whose forward ran on
// batch_norm_forward_kernel, it recomputes the mask from x (mask_from_x.on; relu_y and
// grads.dresidual undefined), which takes the batch norm's bias too (undefined: zeros).
struct ReluMaskFromX {
  bool on = false;
  Tensor bias;
};
void batch_norm_forward_kernel(const BatchNormInputs& in, const Tensor& y, const BatchNormStats& stats,
                               double momentum, double eps, const Tensor& z = {}, bool relu = false);
void batch_norm_inference_kernel(const BatchNormInputs& in, const Tensor& y, double eps);
void batch_norm_backward_kernel(const Tensor& dy, const Tensor& x, const Tensor& weight,
                                const BatchNormStats& stats, const BatchNormGrads& grads,
                                const Tensor& relu_y = {}, const ReluMaskFromX& mask_from_x = {});

// The fused training forward y = relu(bn(x) + z) (or relu(bn(x)) when z is undefined) on nabla's
// kernels: the statistics, then one elementwise pass. x, z and y share a layout, contiguous or
// channels_last float32/float16/bfloat16. Without z, the backward recomputes the ReLU's mask from
// x. Returns what ran, for the backward.
BatchNormForward batch_norm_fused_forward(const BatchNormInputs& in, const Tensor& z, const Tensor& y,
                                          const BatchNormStats& stats, double momentum, double eps);

// What the fused forward leaves for its backward.
struct FusedBatchNormSaved {
  Tensor x, y, weight, bias;
  BatchNormStats stats;
  bool add = false;  // relu(bn(x) + z) rather than relu(bn(x))
  BatchNormImpl impl = BatchNormImpl::Kernel;
};
// Writes dx, dweight, dbias and (when saved.add) dresidual, all defined.
void batch_norm_fused_backward(const Tensor& dy, const FusedBatchNormSaved& saved, double eps,
                               const BatchNormGrads& grads);

using RowNorm = cpu::RowNorm;
// y (forward) and dy (backward) have x's dtype, or are float16/bfloat16 beside a float32 x (the
// lower-precision output option of layer_norm). add_layer_norm's residual: the forward normalizes
// x + residual and writes that sum (x's dtype) too; its backward (x the saved sum) adds dsum, the
// gradient that reached the sum directly, into dx and writes the total again to dresidual (of the
// residual's dtype). residual and dresidual have x's dtype or are 16-bit beside float32. These
// mixed calls run only on the vectorized kernels (D a multiple of 16 bytes, rows 16-byte aligned,
// not too long): where those do not apply the functions return false and write nothing, and the
// caller composes or converts. Same-dtype calls without a residual always run and return true.
bool layer_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps,
                        const Tensor& y, const Tensor& mean, const Tensor& rstd,
                        RowNorm kind = RowNorm::Layer, const Tensor& residual = {}, const Tensor& sum = {});
bool layer_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& mean,
                         const Tensor& rstd, const Tensor& dx, const Tensor& dweight, const Tensor& dbias,
                         RowNorm kind = RowNorm::Layer, const Tensor& dsum = {},
                         const Tensor& dresidual = {});

// Group normalization (Note [Group norm] in norm/group_norm.cu): x (N, C, *) contiguous, or 4-d
// channels_last; y laid out as x. weight, bias (C) or undefined, mean and rstd (N, groups), all of
// the statistics' dtype (float64 for float64 x, float32 otherwise).
void group_norm_forward(const Tensor& x, int64_t groups, const Tensor& weight, const Tensor& bias, double eps,
                        const Tensor& y, const Tensor& mean, const Tensor& rstd);
// dx (laid out as x; undefined: not computed), and per (sample, channel) the shares of dweight
// and dbias, (N, C) of the statistics' dtype (their sums over N are the gradients).
void group_norm_backward(const Tensor& dy, const Tensor& x, int64_t groups, const Tensor& weight,
                         const Tensor& mean, const Tensor& rstd, const Tensor& dx, const Tensor& dweight_part,
                         const Tensor& dbias_part);

}  // namespace nabla::ops::cuda
