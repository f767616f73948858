// Internal. The fused unscale + inf/NaN check on CUDA (amp/cuda/unscale.cu). Declared in plain
// C++ so that amp/grad_scaler.cpp compiles without nvcc; it calls them through nabla::dispatch,
// so a build without CUDA needs no definitions (Note [One backend dispatch]).
#pragma once

#include "nabla/core/tensor.h"

namespace nabla::amp::cuda {

// A gradient the fused kernel takes: float32, dense (any memory order), on a CUDA device.
bool unscale_eligible(const Tensor& grad);

// grads[i] *= inv_scale in place, for every tensor (all eligible, on found_inf's device), and
// found_inf (a 1-element float32 tensor) is set to 1 when any result is inf or NaN (it is never
// cleared here). inv_scale is a 1-element float32 tensor on the same device, read by the kernel.
// One launch per batch of tensors on the current stream; no host sync.
void multi_tensor_unscale(const TensorList& grads, const Tensor& inv_scale, const Tensor& found_inf);

}  // namespace nabla::amp::cuda
