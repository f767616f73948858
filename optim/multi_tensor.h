// Fused multi-tensor updates on CUDA: one kernel launch covers every tensor of a list (in
// batches of a fixed capacity), instead of several launches per tensor. Only a dense
// (contiguous or channels_last) float32 CUDA parameter whose gradient and state tensors are
// float32 with its very sizes and strides qualifies (multi_tensor_eligible): the update is then
// elementwise over the same memory order. The optimizers update all other tensors with ordinary ops.
// The optimizers reach these entry points only through fusable() and run_fused() below, so in a
// build without CUDA they compile away (Note [One backend dispatch] in core/dispatch.h).
#pragma once

#include <utility>
#include <vector>

#include "nabla/core/dispatch.h"
#include "nabla/core/error.h"
#include "nabla/core/tensor.h"

namespace nabla::optim::cuda {

bool multi_tensor_eligible(const Tensor& param, const TensorList& grad_and_state);

// The learning rate is read from device memory (a 1-element float32 tensor on the parameters'
// device, Optimizer::device_lr), so a captured update replays with the current one.
struct SgdStep {
  Tensor lr;
  double weight_decay, momentum, dampening;
  bool nesterov;
  Tensor skip_if = {};  // defined: a 1-element float32 flag; nothing is written while it is nonzero or NaN
};
// buffers[i] may be undefined when momentum == 0; first[i]: buffer i is new (set it to d_p).
void multi_tensor_sgd(const TensorList& params, const TensorList& grads, const TensorList& buffers,
                      const std::vector<bool>& first, const SgdStep& step);

struct AdamStep {
  Tensor lr;  // 1 float32 element on the parameters' device, as SgdStep's
  double beta1, beta2, eps, weight_decay;
  bool decoupled_weight_decay, amsgrad;
  Tensor skip_if = {};  // as SgdStep's: nothing is written (steps included) while it is set
};
// steps[i]: tensor i's step count, a 0-d float32 tensor on its device that this update reads
// (its bias corrections use count + 1) and then increments, so the host never computes them and
// a captured update replays correctly. max_exp_avg_sqs is used only with amsgrad.
void multi_tensor_adam(const TensorList& params, const TensorList& grads, const TensorList& exp_avgs,
                       const TensorList& exp_avg_sqs, const TensorList& max_exp_avg_sqs,
                       const TensorList& steps, const AdamStep& step);

// The sum of squares of all elements of `tensors` (each float32, dense, on one CUDA
// device) as a 0-d float32 tensor on that device: one launch per batch of tensors writes
// per-block partial sums, and one reduction adds them up (no host synchronization).
Tensor multi_tensor_sum_of_squares(const TensorList& tensors);

// tensors[i] *= factor (a 1-element float32 tensor on their device) for dense float32 CUDA
// tensors, one launch per batch of tensors: clip_grad_norm_'s scaling.
void multi_tensor_scale_(const TensorList& tensors, const Tensor& factor);

}  // namespace nabla::optim::cuda

namespace nabla::optim {

// Whether `param` (with its gradient and state) takes the fused CUDA update; never on the CPU.
inline bool fusable(const Tensor& param, const TensorList& grad_and_state) {
  return dispatch(
      "multi_tensor_eligible", param, [] { return false; },
      [&] { return cuda::multi_tensor_eligible(param, grad_and_state); });
}

// Runs `update`, a fused update of tensors that fusable() took (`first` is one of them).
template <class Update>
void run_fused(const char* op, const Tensor& first, Update&& update) {
  dispatch(
      op, first, [] { NABLA_ASSERT(false, "a CPU tensor reached a fused CUDA update"); },
      std::forward<Update>(update));
}

}  // namespace nabla::optim
