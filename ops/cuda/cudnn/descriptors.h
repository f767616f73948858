// Internal (ops/cuda only). Move-only RAII wrappers for the cuDNN descriptors that convolution
// (conv/conv.cpp) and batch norm (batch_norm/cudnn.cpp) need, each filled from a tensor or the
// op's options.
#pragma once

#include <cudnn.h>

#include <climits>
#include <utility>

#include "nabla/core/cuda/check.h"
#include "nabla/core/tensor.h"
#include "nabla/ops/detail/conv.h"

namespace nabla::ops::cuda {

inline cudnnDataType_t cudnn_type(DType dtype) {
  switch (dtype) {
    case DType::Float32:
      return CUDNN_DATA_FLOAT;
    case DType::Float64:
      return CUDNN_DATA_DOUBLE;
    case DType::Float16:
      return CUDNN_DATA_HALF;
    case DType::BFloat16:
      return CUDNN_DATA_BFLOAT16;
    default:
      NABLA_CHECK(false, "cuDNN: dtype {} is not supported (expected a floating type)", dtype_name(dtype));
  }
  __builtin_unreachable();
}

// A size or stride as cuDNN's int (the caller has checked numel <= INT_MAX).
inline int as_int(int64_t v) {
  NABLA_ASSERT(v >= 0 && v <= INT_MAX, "cuDNN descriptor value {} out of int range", v);
  return static_cast<int>(v);
}

template <typename Handle, cudnnStatus_t (*Create)(Handle*), cudnnStatus_t (*Destroy)(Handle)>
class CudnnDescriptor {
 public:
  CudnnDescriptor() { NABLA_CUDNN_CHECK(Create(&handle_)); }
  ~CudnnDescriptor() {
    if (handle_) Destroy(handle_);
  }
  CudnnDescriptor(CudnnDescriptor&& other) noexcept : handle_(std::exchange(other.handle_, nullptr)) {}
  CudnnDescriptor& operator=(CudnnDescriptor&& other) noexcept {
    if (this != &other) {
      if (handle_) Destroy(handle_);
      handle_ = std::exchange(other.handle_, nullptr);
    }
    return *this;
  }
  CudnnDescriptor(const CudnnDescriptor&) = delete;
  CudnnDescriptor& operator=(const CudnnDescriptor&) = delete;
  Handle get() const { return handle_; }

 private:
  Handle handle_ = nullptr;
};

using CudnnTensor =
    CudnnDescriptor<cudnnTensorDescriptor_t, cudnnCreateTensorDescriptor, cudnnDestroyTensorDescriptor>;

// The ReLU activation of cuDNN's fused batch norm + ReLU (+ add) calls.
class ReluDescriptor {
 public:
  ReluDescriptor() {
    NABLA_CUDNN_CHECK(
        cudnnSetActivationDescriptor(desc_.get(), CUDNN_ACTIVATION_RELU, CUDNN_PROPAGATE_NAN, 0.0));
  }
  cudnnActivationDescriptor_t get() const { return desc_.get(); }

 private:
  CudnnDescriptor<cudnnActivationDescriptor_t, cudnnCreateActivationDescriptor,
                  cudnnDestroyActivationDescriptor>
      desc_;
};

// A 4-d tensor with its real strides (NCHW or NHWC).
class TensorDescriptor {
 public:
  explicit TensorDescriptor(const Tensor& t) {
    NABLA_CUDNN_CHECK(cudnnSetTensor4dDescriptorEx(desc_.get(), cudnn_type(t.dtype()), as_int(t.size(0)),
                                                   as_int(t.size(1)), as_int(t.size(2)), as_int(t.size(3)),
                                                   as_int(t.stride(0)), as_int(t.stride(1)),
                                                   as_int(t.stride(2)), as_int(t.stride(3))));
  }
  cudnnTensorDescriptor_t get() const { return desc_.get(); }

 private:
  CudnnTensor desc_;
};

// A weight (O, C / groups, kH, kW), dense in NCHW or NHWC order.
class FilterDescriptor {
 public:
  FilterDescriptor(const Tensor& w, bool nhwc) {
    NABLA_CUDNN_CHECK(cudnnSetFilter4dDescriptor(
        desc_.get(), cudnn_type(w.dtype()), nhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW, as_int(w.size(0)),
        as_int(w.size(1)), as_int(w.size(2)), as_int(w.size(3))));
  }
  cudnnFilterDescriptor_t get() const { return desc_.get(); }

 private:
  CudnnDescriptor<cudnnFilterDescriptor_t, cudnnCreateFilterDescriptor, cudnnDestroyFilterDescriptor> desc_;
};

// Padding, stride, dilation and groups; cross-correlation (as PyTorch), float32 accumulation
// for every dtype but float64.
class ConvolutionDescriptor {
 public:
  ConvolutionDescriptor(const ConvParams& p, DType dtype) {
    const cudnnDataType_t compute = dtype == kFloat64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
    NABLA_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(
        desc_.get(), as_int(p.padding[0]), as_int(p.padding[1]), as_int(p.stride[0]), as_int(p.stride[1]),
        as_int(p.dilation[0]), as_int(p.dilation[1]), CUDNN_CROSS_CORRELATION, compute));
    NABLA_CUDNN_CHECK(cudnnSetConvolutionGroupCount(desc_.get(), as_int(p.groups)));
  }
  void set_math(cudnnMathType_t math) { NABLA_CUDNN_CHECK(cudnnSetConvolutionMathType(desc_.get(), math)); }
  cudnnConvolutionDescriptor_t get() const { return desc_.get(); }

 private:
  CudnnDescriptor<cudnnConvolutionDescriptor_t, cudnnCreateConvolutionDescriptor,
                  cudnnDestroyConvolutionDescriptor>
      desc_;
};

}  // namespace nabla::ops::cuda
