// Internal (CUDA sources). Makes a device current for a scope and restores the previous one:
// kernels must launch on their stream's device, and cuDNN/cuBLAS handles and workspaces belong
// to the current device. Header-only and CUDA-runtime only, so .cu and .cpp files share it.
#pragma once

#include <cuda_runtime_api.h>

#include "nabla/core/cuda/check.h"

namespace nabla::cuda {

class DeviceGuard {
 public:
  explicit DeviceGuard(int index) {
    NABLA_CUDA_CHECK(cudaGetDevice(&previous_));
    if (previous_ != index) NABLA_CUDA_CHECK(cudaSetDevice(index));
  }
  ~DeviceGuard() {
    int now = -1;
    if (cudaGetDevice(&now) == cudaSuccess && now != previous_) cudaSetDevice(previous_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;
};

}  // namespace nabla::cuda
