// Internal. The batch-norm family's backend seam: what a backend computes, declared once for
// every backend (Note [Backend seams] in docs/design/routes.md).
//
// A training forward returns what its backward needs (BatchNormSaved), including an opaque
// route tag and workspace of the backend's own; the front end (ops/norm.cpp) records one autograd
// node that keeps it and hands it back to the same backend's backward. Front ends never learn
// which implementation ran: the CPU backend is ops/cpu/norm.cpp, the CUDA backend's route table
// ops/cuda/batch_norm/routes.cpp.
//
// x is dense in contiguous or channels_last order; y, z, dy and the gradients share its layout.
// Per-channel tensors are (C), contiguous, in the parameter dtype (float32 for float16/bfloat16 x,
// x's dtype otherwise).
#pragma once

#include <cstdint>

#include <utility>

#include "nabla/core/tensor.h"
#include "nabla/ops/detail/dispatch.h"

namespace nabla::ops {

// The inputs of one batch-norm call; weight, bias and the running stats may be undefined.
struct BatchNormInputs {
  Tensor x, weight, bias, running_mean, running_var;
};

// The per-channel results of a training forward: the batch mean and 1 / sqrt(biased var + eps).
struct BatchNormStats {
  Tensor mean, invstd;
};

// Gradients of batch norm; a backward writes every defined one.
struct BatchNormGrads {
  Tensor dx, dresidual, dweight, dbias;
};

// What a training forward leaves for its backward.
struct BatchNormSaved {
  Tensor x = {};
  Tensor y = {};  // the output, kept for a fused ReLU's mask where the route reads it; else undefined
  Tensor weight = {}, bias = {};
  BatchNormStats stats = {};
  Tensor reserve = {};  // the backend's workspace from the forward, or undefined
  uint8_t route = 0;    // which implementation ran: the backend's own tag (0: its default kernels)
  bool relu = false;    // relu(bn(x) [+ z])
  bool add = false;     // ... + z
};

// One backend's batch norm.
struct BatchNormBackend {
  // Whether `forward` takes relu(bn(x) [+ z]) in one pass for this x in training. Where it does
  // not, front ends compose batch_norm, add and relu.
  bool (*fuses_relu)(const Tensor& x);
  // Training: y = bn(x) [+ z] [relu'd] with the batch statistics, written to `stats`; the
  // running stats (if defined) take the unbiased variance in place. relu and z only where
  // fuses_relu(x) holds; then weight and bias are defined.
  BatchNormSaved (*forward)(const BatchNormInputs& in, const Tensor& z, bool relu, const Tensor& y,
                            const BatchNormStats& stats, double momentum, double eps);
  // Eval: normalizes with the running stats.
  void (*inference)(const BatchNormInputs& in, const Tensor& y, double eps);
  // Training backward from what `forward` saved: writes every defined gradient of `grads`
  // (dresidual only for saved.add).
  void (*backward)(const Tensor& dy, const BatchNormSaved& saved, double eps, const BatchNormGrads& grads);
};

namespace cpu {
extern const BatchNormBackend kBatchNorm;  // ops/cpu/norm.cpp
}
namespace cuda {
extern const BatchNormBackend kBatchNorm;  // ops/cuda/batch_norm/routes.cpp (CUDA builds only)
}

// The batch-norm backend of `device`, for asking what it can do (untimed: backend_of in
// ops/detail/dispatch.h).
inline const BatchNormBackend& batch_norm_backend_of(const Device& device) {
  return backend_of<cpu::kBatchNorm, cuda::kBatchNorm>("batch_norm", device);
}

// Runs call(backend) with the batch-norm backend of `on`'s device, timed as `op`: the family's
// one dispatch (Note [One backend dispatch] in core/dispatch.h; a build without CUDA compiles the
// CUDA branch away, so cuda::kBatchNorm needs no definition there).
template <class Call>
decltype(auto) on_batch_norm_backend(const char* op, const Tensor& on, Call&& call) {
  return on_backend<cpu::kBatchNorm, cuda::kBatchNorm>(op, on, std::forward<Call>(call));
}

}  // namespace nabla::ops
