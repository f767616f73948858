// The CUDA launchers of y = alpha * tanh(x) and its gradient (scaled_tanh.cu). main.cpp wraps
// them in an autograd::Function. This header includes only nabla's core tensor header, which is
// all nvcc needs to see.
#pragma once

#include <nabla/core/tensor.h>

// Tensors: float32, contiguous, on one CUDA device, of equal shape. Kernels run on that
// device's current stream (nabla::cuda::current_stream()), like nabla's own.
void scaled_tanh_forward(const nabla::Tensor& x, double alpha, const nabla::Tensor& y);
void scaled_tanh_backward(const nabla::Tensor& grad_y, const nabla::Tensor& y, double alpha,
                          const nabla::Tensor& grad_x);
