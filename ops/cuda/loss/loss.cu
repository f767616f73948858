// CUDA negative log-likelihood pick (forward) and its scatter (backward, a gather over every
// element of grad_logp: no zero-fill, no atomics).
//
// Neither kernel reads anything back to the host, so cross_entropy on CUDA never waits for the
// device. Target values therefore cannot be checked before the kernel runs: a target outside
// [0, C) that is not ignore_index makes its loss NaN (so the mistake shows in the loss) and gets
// no gradient; nothing is read out of bounds.
#include <cmath>

#include "nabla/ops/cuda/common.cuh"
#include "nabla/ops/cuda/elementwise/elementwise.cuh"
#include "nabla/ops/cuda/loss/kernels.h"

namespace nabla::ops::cuda {

namespace {

template <typename T>
__global__ void __launch_bounds__(kBlockSize)
    nll_forward_kernel(const T* __restrict__ logp, const int64_t* __restrict__ target, T* __restrict__ out,
                       int64_t total, int64_t C, int64_t S, int64_t ignore_index) {
  using A = opmath_t<T>;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t t = target[i];
    A v = A(0);
    if (t != ignore_index)
      v = (t >= 0 && t < C) ? -load_as_opmath(logp[((i / S) * C + t) * S + i % S]) : A(NAN);
    out[i] = store_from<T>(v);
  }
}

template <typename T>
__global__ void __launch_bounds__(kBlockSize)
    nll_backward_kernel(const T* __restrict__ grad, const int64_t* __restrict__ target,
                        T* __restrict__ grad_logp, int64_t total, int64_t C, int64_t S,
                        int64_t ignore_index) {
  using A = opmath_t<T>;
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < total;
       e += int64_t{gridDim.x} * blockDim.x) {
    const int64_t s = e % S, c = (e / S) % C, n = e / (S * C);
    const int64_t t = target[n * S + s];
    grad_logp[e] = store_from<T>(t == c && t != ignore_index ? -load_as_opmath(grad[n * S + s]) : A(0));
  }
}

}  // namespace

void nll_forward(const Tensor& logp, const Tensor& target, int64_t ignore_index, const Tensor& out) {
  const int64_t total = out.numel();
  if (total == 0) return;
  DeviceScope device(logp.device().index);
  dispatch_device<TypeSet::Floating>(logp.dtype(), "nll_loss", [&]<typename T>() {
    nll_forward_kernel<T><<<blocks_for(total), kBlockSize, 0, stream_for(logp)>>>(
        static_cast<const T*>(logp.data_ptr()), static_cast<const int64_t*>(target.data_ptr()),
        static_cast<T*>(out.data_ptr()), total, logp.size(1), logp.size(2), ignore_index);
    NABLA_CUDA_CHECK_LAUNCH();
  });
}

void nll_backward(const Tensor& grad, const Tensor& target, int64_t ignore_index, const Tensor& grad_logp) {
  const int64_t total = grad_logp.numel();
  if (total == 0) return;
  DeviceScope device(grad.device().index);
  dispatch_device<TypeSet::Floating>(grad.dtype(), "nll_loss_backward", [&]<typename T>() {
    nll_backward_kernel<T><<<blocks_for(total), kBlockSize, 0, stream_for(grad)>>>(
        static_cast<const T*>(grad.data_ptr()), static_cast<const int64_t*>(target.data_ptr()),
        static_cast<T*>(grad_logp.data_ptr()), total, grad_logp.size(1), grad_logp.size(2), ignore_index);
    NABLA_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace nabla::ops::cuda
