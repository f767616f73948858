// Fused multi-tensor SGD and Adam(W) updates for float32 tensors on CUDA, in tables of up to
// kMaxTensors parameters a launch (ops/cuda/elementwise/tensor_table.cuh), so a group of up to kMaxTensors
// parameters takes one launch, and larger groups one per table. Arithmetic is float, as in
// PyTorch's fused optimizers.
#include <cuda_runtime.h>

#include <cmath>

#include "nabla/core/error.h"
#include "nabla/ops/cuda/elementwise/tensor_table.cuh"
#include "nabla/ops/elementwise.h"
#include "nabla/ops/factory.h"
#include "nabla/ops/reduce.h"
#include "nabla/optim/multi_tensor.h"

namespace nabla::optim::cuda {

namespace {

using ops::cuda::EntryTable;
using ops::cuda::for_grid_stride;
using ops::cuda::launch_tables;
using ops::cuda::LaunchScope;

constexpr int kMaxTensors = 36;
constexpr ops::cuda::TableLaunch kLaunch{};
constexpr int kBlock = kLaunch.block;

struct SgdEntry {
  float* param;
  const float* grad;
  float* buffer;  // null without momentum
  int64_t numel;
  int first;
};
using SgdTable = EntryTable<SgdEntry, kMaxTensors>;

struct AdamEntry {
  float* param;
  const float* grad;
  float* exp_avg;
  float* exp_avg_sq;
  float* max_exp_avg_sq;  // null without amsgrad
  const float* step;      // the tensor's step count before this update
  int64_t numel;
};
using AdamTable = EntryTable<AdamEntry, kMaxTensors>;

// Whether a GradScaler flag says to skip: inf/NaN found (a NaN flag too).
__device__ __forceinline__ bool skipped(const float* skip_if) {
  return skip_if != nullptr && !(*skip_if == 0.0f);
}

__global__ void sgd_kernel(SgdTable table, const float* lr_at, float wd, float momentum, float dampening,
                           int nesterov, const float* skip_if) {
  if (skipped(skip_if)) return;
  const SgdEntry e = table.entries[blockIdx.y];
  const float lr = *lr_at;
  for_grid_stride(e.numel, [&](int64_t i) {
    const float p = e.param[i];
    float d_p = e.grad[i];
    if (wd != 0.0f) d_p += wd * p;
    if (e.buffer != nullptr) {
      float buf = e.first ? d_p : momentum * e.buffer[i] + (1.0f - dampening) * d_p;
      e.buffer[i] = buf;
      d_p = nesterov ? d_p + momentum * buf : buf;
    }
    e.param[i] = p - lr * d_p;
  });
}

// The step's scalars come from device memory (lr, the step count), and the bias corrections
// are computed here in double as the host computed them before, so a graph replays any step.
__global__ void adam_kernel(AdamTable table, const float* lr_at, double beta1_d, double beta2_d, float eps,
                            float wd, int decoupled, const float* skip_if) {
  if (skipped(skip_if)) return;
  const AdamEntry e = table.entries[blockIdx.y];
  const float lr = *lr_at;
  const double t = static_cast<double>(*e.step) + 1.0;
  const double bias_correction1 = 1.0 - ::pow(beta1_d, t);
  const float step_size = static_cast<float>(static_cast<double>(lr) / bias_correction1);
  const float bias_correction2_sqrt = static_cast<float>(::sqrt(1.0 - ::pow(beta2_d, t)));
  const float beta1 = static_cast<float>(beta1_d), beta2 = static_cast<float>(beta2_d);
  for_grid_stride(e.numel, [&](int64_t i) {
    float p = e.param[i];
    float g = e.grad[i];
    if (wd != 0.0f) {
      if (decoupled) {
        p *= 1.0f - lr * wd;
      } else {
        g += wd * p;
      }
    }
    const float m = beta1 * e.exp_avg[i] + (1.0f - beta1) * g;
    const float v = beta2 * e.exp_avg_sq[i] + (1.0f - beta2) * g * g;
    e.exp_avg[i] = m;
    e.exp_avg_sq[i] = v;
    float v_used = v;
    if (e.max_exp_avg_sq != nullptr) {
      v_used = fmaxf(e.max_exp_avg_sq[i], v);
      e.max_exp_avg_sq[i] = v_used;
    }
    const float denom = sqrtf(v_used) / bias_correction2_sqrt + eps;
    e.param[i] = p - step_size * (m / denom);
  });
}

constexpr int kMaxSteps = 128;
struct StepEntry {
  float* step;
  int64_t numel;  // 1: launch_tables sizes the grid by it
};
using StepTable = EntryTable<StepEntry, kMaxSteps>;

// Adam's step counts += 1, after the update that read them (not on a skipped step).
__global__ void increment_steps_kernel(StepTable table, const float* skip_if) {
  if (skipped(skip_if) || threadIdx.x != 0 || blockIdx.x != 0) return;
  *table.entries[blockIdx.y].step += 1.0f;
}

constexpr int kMaxNormTensors = 128;
struct NormEntry {
  const float* data;
  int64_t numel;
};
using NormTable = EntryTable<NormEntry, kMaxNormTensors>;

// partials[blockIdx.y * gridDim.x + blockIdx.x] = this block's share of sum(x^2) of tensor y.
__global__ void sum_of_squares_kernel(NormTable table, float* partials) {
  __shared__ float shared[kBlock];
  const NormEntry e = table.entries[blockIdx.y];
  float acc = 0.0f;
  for_grid_stride(e.numel, [&](int64_t i) { acc += e.data[i] * e.data[i]; });
  shared[threadIdx.x] = acc;
  __syncthreads();
  for (int half = kBlock / 2; half > 0; half /= 2) {
    if (static_cast<int>(threadIdx.x) < half) shared[threadIdx.x] += shared[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) partials[int64_t{blockIdx.y} * gridDim.x + blockIdx.x] = shared[0];
}

struct ScaleEntry {
  float* data;
  int64_t numel;
};
using ScaleTable = EntryTable<ScaleEntry, kMaxNormTensors>;

// x *= *factor for every tensor of the table (the factor stays on the device: no host read).
__global__ void scale_kernel(ScaleTable table, const float* factor) {
  const ScaleEntry e = table.entries[blockIdx.y];
  const float f = *factor;
  for_grid_stride(e.numel, [&](int64_t i) { e.data[i] *= f; });
}

float* float_ptr(const Tensor& t) {
  return t.defined() ? static_cast<float*>(t.data_ptr()) : nullptr;
}

// A 1-element float32 tensor on `device` (a learning rate, a GradScaler flag), or null when
// `t` is undefined and `optional`.
const float* scalar_on(const Tensor& t, Device device, const char* op, const char* what, bool optional) {
  if (optional && !t.defined()) return nullptr;
  NABLA_CHECK(t.defined() && t.device() == device && t.dtype() == kFloat32 && t.numel() == 1,
              "{}: {} must be a 1-element float32 tensor on {}, got {}", op, what, device.str(), describe(t));
  return static_cast<const float*>(t.data_ptr());
}

void check_same_device(const TensorList& params) {
  for (const auto& p : params) {
    NABLA_CHECK(p.device() == params[0].device(),
                "optim: a fused update needs all tensors on one device, got {} and {}", p.device().str(),
                params[0].device().str());
  }
}

}  // namespace

Tensor multi_tensor_sum_of_squares(const TensorList& tensors) {
  NABLA_CHECK(!tensors.empty(), "multi_tensor_sum_of_squares: needs at least one tensor");
  check_same_device(tensors);
  for (const auto& t : tensors) {
    // Any dense layout: the sum of squares does not care about the order of the elements.
    NABLA_CHECK(
        t.is_cuda() && t.dtype() == kFloat32 &&
            (t.is_contiguous() || t.is_contiguous(MemoryFormat::ChannelsLast)),
        "multi_tensor_sum_of_squares: needs dense (contiguous or channels_last) float32 CUDA tensors, got {}",
        describe(t));
  }
  const LaunchScope scope(tensors[0].device().index);
  Tensor total;
  launch_tables<kMaxNormTensors, NormEntry>(
      tensors.size(), kLaunch,
      [&](size_t i, NormEntry& e) {
        e = {static_cast<const float*>(tensors[i].data_ptr()), tensors[i].numel()};
        return e.numel;
      },
      [&](const NormTable& table, dim3 grid) {
        Tensor partials =
            empty({int64_t{grid.x} * grid.y}, {.dtype = kFloat32, .device = tensors[0].device()});
        sum_of_squares_kernel<<<grid, kBlock, 0, scope.stream()>>>(table,
                                                                   static_cast<float*>(partials.data_ptr()));
        Tensor part = sum(partials);
        total = total.defined() ? add(total, part) : part;
      });
  return total.defined() ? total : zeros({}, {.dtype = kFloat32, .device = tensors[0].device()});
}

void multi_tensor_scale_(const TensorList& tensors, const Tensor& factor) {
  if (tensors.empty()) return;
  check_same_device(tensors);
  NABLA_CHECK(factor.is_cuda() && factor.dtype() == kFloat32 && factor.numel() == 1 &&
                  factor.device() == tensors[0].device(),
              "multi_tensor_scale_: the factor must be one float32 element on the tensors' device, got {}",
              describe(factor));
  for (const auto& t : tensors) {
    NABLA_CHECK(t.is_cuda() && t.dtype() == kFloat32 &&
                    (t.is_contiguous() || t.is_contiguous(MemoryFormat::ChannelsLast)),
                "multi_tensor_scale_: needs dense (contiguous or channels_last) float32 CUDA tensors, got {}",
                describe(t));
  }
  const LaunchScope scope(tensors[0].device().index);
  const Tensor f = factor.contiguous();
  launch_tables<kMaxNormTensors, ScaleEntry>(
      tensors.size(), kLaunch,
      [&](size_t i, ScaleEntry& e) {
        e = {static_cast<float*>(tensors[i].data_ptr()), tensors[i].numel()};
        return e.numel;
      },
      [&](const ScaleTable& table, dim3 grid) {
        scale_kernel<<<grid, kBlock, 0, scope.stream()>>>(table, static_cast<const float*>(f.data_ptr()));
      });
  for (const auto& t : tensors) t.bump_version();
}

bool multi_tensor_eligible(const Tensor& param, const TensorList& grad_and_state) {
  if (!param.is_cuda() || param.dtype() != kFloat32) return false;
  if (!param.is_contiguous() && !param.is_contiguous(MemoryFormat::ChannelsLast)) return false;
  for (const auto& t : grad_and_state) {
    if (!t.defined()) continue;  // state the update does not use
    if (t.dtype() != kFloat32 || t.device() != param.device() || t.sizes() != param.sizes() ||
        t.strides() != param.strides()) {
      return false;
    }
  }
  return true;
}

void multi_tensor_sgd(const TensorList& params, const TensorList& grads, const TensorList& buffers,
                      const std::vector<bool>& first, const SgdStep& step) {
  NABLA_ASSERT(params.size() == grads.size() && params.size() == buffers.size() &&
               params.size() == first.size());
  if (params.empty()) return;
  check_same_device(params);
  const Device device = params[0].device();
  const float* skip_if = scalar_on(step.skip_if, device, "multi_tensor_sgd", "skip_if", true);
  const float* lr = scalar_on(step.lr, device, "multi_tensor_sgd", "lr", false);
  const LaunchScope scope(params[0].device().index);
  const bool has_buffer = step.momentum != 0.0;
  launch_tables<kMaxTensors, SgdEntry>(
      params.size(), kLaunch,
      [&](size_t i, SgdEntry& e) {
        e = {float_ptr(params[i]), float_ptr(grads[i]), has_buffer ? float_ptr(buffers[i]) : nullptr,
             params[i].numel(), first[i] ? 1 : 0};
        params[i].bump_version();
        if (has_buffer) buffers[i].bump_version();
        return e.numel;
      },
      [&](const SgdTable& table, dim3 grid) {
        sgd_kernel<<<grid, kBlock, 0, scope.stream()>>>(
            table, lr, static_cast<float>(step.weight_decay), static_cast<float>(step.momentum),
            static_cast<float>(step.dampening), step.nesterov ? 1 : 0, skip_if);
      });
}

void multi_tensor_adam(const TensorList& params, const TensorList& grads, const TensorList& exp_avgs,
                       const TensorList& exp_avg_sqs, const TensorList& max_exp_avg_sqs,
                       const TensorList& steps, const AdamStep& step) {
  NABLA_ASSERT(params.size() == grads.size() && params.size() == exp_avgs.size() &&
               params.size() == exp_avg_sqs.size() && params.size() == max_exp_avg_sqs.size() &&
               params.size() == steps.size());
  if (params.empty()) return;
  check_same_device(params);
  const Device device = params[0].device();
  const float* skip_if = scalar_on(step.skip_if, device, "multi_tensor_adam", "skip_if", true);
  const float* lr = scalar_on(step.lr, device, "multi_tensor_adam", "lr", false);
  for (const auto& t : steps) scalar_on(t, device, "multi_tensor_adam", "a step count", false);
  const LaunchScope scope(device.index);
  launch_tables<kMaxTensors, AdamEntry>(
      params.size(), kLaunch,
      [&](size_t i, AdamEntry& e) {
        e = {float_ptr(params[i]),
             float_ptr(grads[i]),
             float_ptr(exp_avgs[i]),
             float_ptr(exp_avg_sqs[i]),
             step.amsgrad ? float_ptr(max_exp_avg_sqs[i]) : nullptr,
             float_ptr(steps[i]),
             params[i].numel()};
        params[i].bump_version();
        exp_avgs[i].bump_version();
        exp_avg_sqs[i].bump_version();
        if (step.amsgrad) max_exp_avg_sqs[i].bump_version();
        return e.numel;
      },
      [&](const AdamTable& table, dim3 grid) {
        adam_kernel<<<grid, kBlock, 0, scope.stream()>>>(
            table, lr, step.beta1, step.beta2, static_cast<float>(step.eps),
            static_cast<float>(step.weight_decay), step.decoupled_weight_decay ? 1 : 0, skip_if);
      });
  // After every table's update: the counts they read move on.
  launch_tables<kMaxSteps, StepEntry>(
      steps.size(), kLaunch,
      [&](size_t i, StepEntry& e) {
        e = {float_ptr(steps[i]), 1};
        steps[i].bump_version();
        return e.numel;
      },
      [&](const StepTable& table, dim3 grid) {
        increment_steps_kernel<<<grid, kBlock, 0, scope.stream()>>>(table, skip_if);
      });
}

}  // namespace nabla::optim::cuda
