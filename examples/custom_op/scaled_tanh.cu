// The CUDA kernels of ScaledTanhCuda, launched on nabla's current stream so they order
// correctly with nabla's own kernels (and inside CUDA graph captures).
#include <cuda_runtime.h>

#include <algorithm>
#include <initializer_list>

#include <nabla/core/cuda/stream.h>
#include <nabla/core/error.h>

#include "scaled_tanh.h"

namespace {

__global__ void forward_kernel(const float* x, float* y, float alpha, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    y[i] = alpha * tanhf(x[i]);
  }
}

// d/dx alpha * tanh(x) = alpha * (1 - tanh(x)^2), with tanh(x) = y / alpha.
__global__ void backward_kernel(const float* grad_y, const float* y, float alpha, float* grad_x, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    float t = y[i] / alpha;
    grad_x[i] = grad_y[i] * alpha * (1.f - t * t);
  }
}

void check_args(const char* op, std::initializer_list<const nabla::Tensor*> tensors) {
  for (const nabla::Tensor* t : tensors) {
    NABLA_CHECK(t->is_cuda() && t->dtype() == nabla::kFloat32 && t->is_contiguous(),
                "{}: expects contiguous float32 CUDA tensors, got {}", op, nabla::describe(*t));
    NABLA_CHECK(t->sizes() == (*tensors.begin())->sizes(), "{}: tensors differ in shape", op);
  }
}

void launch_config(int64_t n, int& blocks, int& threads) {
  threads = 256;
  blocks = static_cast<int>(std::min<int64_t>((n + threads - 1) / threads, 65535));
}

void check_launch(const char* op) {
  cudaError_t err = cudaGetLastError();
  NABLA_CHECK(err == cudaSuccess, "{}: kernel launch failed: {}", op, cudaGetErrorString(err));
}

}  // namespace

void scaled_tanh_forward(const nabla::Tensor& x, double alpha, const nabla::Tensor& y) {
  check_args("scaled_tanh_forward", {&x, &y});
  const int64_t n = x.numel();
  if (n == 0) return;
  int blocks = 0, threads = 0;
  launch_config(n, blocks, threads);
  auto stream = static_cast<cudaStream_t>(nabla::cuda::current_stream(x.device().index).handle());
  forward_kernel<<<blocks, threads, 0, stream>>>(x.data_ptr<float>(), y.data_ptr<float>(),
                                                 static_cast<float>(alpha), n);
  check_launch("scaled_tanh_forward");
}

void scaled_tanh_backward(const nabla::Tensor& grad_y, const nabla::Tensor& y, double alpha,
                          const nabla::Tensor& grad_x) {
  check_args("scaled_tanh_backward", {&grad_y, &y, &grad_x});
  const int64_t n = y.numel();
  if (n == 0) return;
  int blocks = 0, threads = 0;
  launch_config(n, blocks, threads);
  auto stream = static_cast<cudaStream_t>(nabla::cuda::current_stream(y.device().index).handle());
  backward_kernel<<<blocks, threads, 0, stream>>>(grad_y.data_ptr<float>(), y.data_ptr<float>(),
                                                  static_cast<float>(alpha), grad_x.data_ptr<float>(), n);
  check_launch("scaled_tanh_backward");
}
